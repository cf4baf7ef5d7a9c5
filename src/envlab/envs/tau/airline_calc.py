"""τ-bench's ``calculate`` tool: ``str(round(float(eval(expression)), 2))`` over digits and
``+ - * / ( ) .``, the same answers and error texts, without the one way to hang the process.

τ-bench evaluates the expression with Python's ``eval``. Only ``**`` can make that run for
minutes (``9**9**9**9``), holding the interpreter (and every episode sharing it) meanwhile. An
expression without ``**`` is evaluated exactly as τ-bench does; one with ``**`` is evaluated
node by node with Python's own operators, and an integer power or product past ``MAX_BITS``
bits is refused (τ-bench would hang, or fail with "int too large to convert to float").
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from envlab.core import ToolCallError

ALLOWED = "0123456789+-*/(). "
MAX_BITS = 1_000_000
"""The largest integer an intermediate ``**`` or ``*`` may make (about 300,000 digits)."""

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def calculate(expression: str) -> str:
    """τ-bench's answer for ``expression``; ``ToolCallError`` with its message where it errs."""
    if not all(char in ALLOWED for char in expression):
        raise ToolCallError("invalid characters in expression")
    try:
        return str(round(float(_evaluate(expression)), 2))
    except ToolCallError:
        raise
    except Exception as e:  # τ-bench answers any exception as "Error: {e}"
        raise ToolCallError(str(e)) from None


def _evaluate(expression: str) -> Any:
    source = expression.lstrip(" \t")  # as eval() does with a string
    tree = compile(source, "<string>", "eval", ast.PyCF_ONLY_AST)  # eval's own SyntaxError
    if not any(isinstance(node, ast.Pow) for node in ast.walk(tree)):
        return eval(compile(tree, "<string>", "eval"), {"__builtins__": None}, {})
    return _node(tree.body)


def _node(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_node(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _node(node.left), _node(node.right)
        _check_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.Tuple):
        return tuple(_node(e) for e in node.elts)
    if isinstance(node, ast.Starred):
        return _node(node.value)
    if isinstance(node, ast.Call):  # "(2)(3)": Python evaluates callee and arguments, then fails
        func = _node(node.func)
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            _node(arg)
        raise TypeError(f"'{type(func).__name__}' object is not callable")
    raise TypeError(f"unsupported expression: {ast.dump(node)[:80]}")


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    if not (isinstance(left, int) and isinstance(right, int)):
        return  # floats overflow on their own, at once
    if isinstance(op, ast.Pow) and right > 0 and abs(left) > 1:
        bits = (abs(left).bit_length() - 1) * right
    elif isinstance(op, ast.Mult):
        bits = left.bit_length() + right.bit_length()
    else:
        return
    if bits > MAX_BITS:
        raise ToolCallError(
            f"the result is too large to calculate (over {MAX_BITS} bits); "
            "calculate with smaller numbers"
        )
