"""The tools both τ domains share, as τ-bench has them: ``calculate`` and
``transfer_to_human_agents`` (after which the episode ends)."""

from __future__ import annotations

import ast

from envlab.core import ToolCallError
from envlab.core.tools import tool

_CALC_CHARS = frozenset("0123456789+-*/(). ")
_CALC_MAX_BITS = 1_000_000


class CommonTools:
    @tool
    def calculate(self, expression: str) -> str:
        """Calculate the result of a mathematical expression.

        Args:
            expression: The mathematical expression to calculate, such as '2 + 2'. The expression
                can contain numbers, operators (+, -, *, /), parentheses, and spaces.
        """
        if not all(char in _CALC_CHARS for char in expression):
            raise ToolCallError("invalid characters in expression")
        try:
            _check_size(expression)
            # only digits, + - * / ( ) . and spaces reach eval, with no builtins
            value = eval(expression, {"__builtins__": None}, {})
            return str(round(float(value), 2))
        except Exception as e:  # τ-bench answers any failure as "Error: <exception>"
            raise ToolCallError(str(e)) from None

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue. Only transfer if
        the user explicitly asks for a human agent, or if the user's issue cannot be resolved by the
        agent with the available tools.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"


def _check_size(expression: str) -> None:
    """Refuse an expression whose integers could grow past ``_CALC_MAX_BITS`` (a power tower);
    what does not parse is left to ``eval``, which raises the same error τ-bench shows."""
    try:
        tree = ast.parse(expression.lstrip(" \t"), "<string>", "eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    bits: dict[int, int | None] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree.body, False)]
    while stack:  # children before parents, without recursion (long sums are deep trees)
        node, ready = stack.pop()
        if ready:
            bits[id(node)] = _int_bits(node, bits)
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in ast.iter_child_nodes(node))


def _int_bits(node: ast.AST, bits: dict[int, int | None]) -> int | None:
    """An upper bound of the bit length of what ``node`` evaluates to if that is an integer;
    ``None`` when it is a float or an error (``bits``: the bounds of its children). Raises
    ``OverflowError`` when a bound passes ``_CALC_MAX_BITS``."""
    if isinstance(node, ast.Constant):
        return node.value.bit_length() if isinstance(node.value, int) else None
    if isinstance(node, ast.UnaryOp):
        return bits[id(node.operand)]
    if not isinstance(node, ast.BinOp):  # an operator, or a call of a number (eval raises)
        return None
    left, right = bits[id(node.left)], bits[id(node.right)]
    if left is None or right is None or isinstance(node.op, ast.Div):
        return None
    if isinstance(node.op, ast.Pow):  # a negative exponent gives a float: still bounded
        exact = isinstance(node.right, ast.Constant)
        exponent = node.right.value if exact else 2 ** min(right, 64)  # type: ignore[attr-defined]
        bound = left * exponent if left > 1 else 1
    elif isinstance(node.op, ast.Mult):
        bound = left + right
    else:  # + - //
        bound = max(left, right) + 1
    if bound > _CALC_MAX_BITS:
        raise OverflowError("int too large to convert to float")
    return bound
