"""An upper bound of what evaluating an arithmetic expression costs, before evaluating it.

A calculator tool that ``eval``s the agent's expression (τ-bench's ``calculate``) runs
CPython's big-integer arithmetic, whose single operations hold the GIL for as long as they
take: no thread, budget or watchdog can stop one, so the whole expression is priced first.
``expression_cost`` walks the syntax tree bottom-up and, for every node, bounds the bit length
of the integer it can produce (or knows it is a float, which costs nothing to work with) and
the digit operations CPython spends on it (30-bit digits: schoolbook products below
Karatsuba's cutoff, ``n**1.585`` above, quadratic long division, squarings for powers). The
bound covers the whole tree, not each operand on its own: an expression of many costly parts
(each under a size limit, hidden under a true division) is priced as their sum.
``check_expression_cost`` raises when a bound passes ``MAX_BITS`` (``OverflowError``, the error
the float conversion would end in) or the total passes ``MAX_COST`` (``ValueError``).
``bench/tools_offloop.py`` checks the bound against measured times.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

MAX_BITS = 1_000_000
"""The largest integer (in bits) an expression may build on the way (128 KB)."""
MAX_COST = 20_000_000
"""The most digit operations an expression may cost in all: about 20-50 ms of CPU."""

_DIGIT = 30  # CPython's int digit
_KARATSUBA = 70  # CPython's KARATSUBA_CUTOFF, in digits
_FLOAT_BITS = 1024  # an int past this does not convert to a float


@dataclass(frozen=True, slots=True)
class _Value:
    """What a node evaluates to: an int of at most ``bits`` bits, a float (or complex), or
    something else (``()``, ``...``; an error)."""

    kind: str  # "int" | "float" | "other"
    bits: int = 0


_FLOAT, _OTHER = _Value("float"), _Value("other")


def _digits(bits: int) -> int:
    return bits // _DIGIT + 1


def _mul_cost(n1: int, n2: int) -> float:
    """Digit operations of a product of ``n1``- and ``n2``-digit ints."""
    small, big = min(n1, n2), max(n1, n2)
    if small < _KARATSUBA:
        return small * big + big
    return math.ceil(big / small) * 4.0 * small**1.585 + big  # Karatsuba on slices of big


def _div_cost(n1: int, n2: int) -> float:
    """Floor division of ``n1`` by at most ``n2`` digits: quadratic, at worst for a divisor of
    half the dividend."""
    worst = min(n2, (n1 + 1) // 2)
    return (n1 - worst + 1) * worst + n1 + n2


def _pow_cost(base_bits: int, exponent: int, base: int | None) -> tuple[float, int]:
    """(digit operations, result bits) of ``base ** exponent`` for ints, ``exponent >= 0``
    (``base``: its magnitude when it is a literal, for a tighter bound)."""
    if base_bits <= 1 or exponent <= 1:
        return float(exponent.bit_length() + 1), base_bits if exponent else 1
    if base is not None and base_bits <= 64:  # 2 ** n has n + 1 bits, not 2n
        result = math.ceil(exponent * math.log2(base) * (1 + 1e-12)) + 1
    else:
        result = base_bits * exponent
    if result > MAX_BITS:
        raise OverflowError("int too large to convert to float")
    cost, size, nb = 0.0, base_bits, _digits(base_bits)
    while size < result:  # a squaring and a product by the base per bit of the exponent
        cost += _mul_cost(_digits(size), _digits(size)) + _mul_cost(_digits(2 * size), nb)
        size *= 2
    return cost, result


def _const_int(node: ast.AST) -> int | None:
    """The value of an int literal, signed (``-3``), else ``None``."""
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def _binop(node: ast.BinOp, left: _Value, right: _Value) -> tuple[_Value, float]:
    op = node.op
    if left.kind == "other" or right.kind == "other":
        return _OTHER, 1.0
    if left.kind == "float" or right.kind == "float":  # the int side becomes a float: O(1)
        big = max(left.bits, right.bits)
        return (_OTHER if big > _FLOAT_BITS else _FLOAT), 1.0
    n1, n2 = _digits(left.bits), _digits(right.bits)
    if isinstance(op, ast.Add | ast.Sub):
        return _Value("int", max(left.bits, right.bits) + 1), float(max(n1, n2))
    if isinstance(op, ast.Mult):
        return _Value("int", left.bits + right.bits), _mul_cost(n1, n2)
    if isinstance(op, ast.FloorDiv | ast.Mod):
        return _Value("int", left.bits + 1), _div_cost(n1, n2)
    if isinstance(op, ast.Div):  # the quotient's 53 bits from shifted operands: linear
        return _FLOAT, float(4 * (n1 + n2))
    if isinstance(op, ast.Pow):
        exponent = _const_int(node.right)
        if exponent is None:  # unknown: as large as its bound allows
            if left.bits > 1 and right.bits > 64:
                raise OverflowError("int too large to convert to float")
            exponent = (1 << right.bits) - 1
        if exponent < 0:  # a float power
            return (_OTHER if left.bits > _FLOAT_BITS else _FLOAT), 1.0
        base = _const_int(node.left)
        cost, bits = _pow_cost(left.bits, exponent, None if base is None else abs(base))
        return _Value("int", bits), cost
    return _OTHER, 1.0  # an operator the calculator's characters cannot write


def _node(node: ast.AST, values: dict[int, _Value]) -> tuple[_Value, float]:
    """The value bound and the cost of ``node`` itself (its children's are counted apart)."""
    if isinstance(node, ast.Constant):
        v = node.value
        if type(v) is int:
            return _Value("int", v.bit_length()), 0.0
        return (_FLOAT if isinstance(v, float | complex) else _OTHER), 0.0
    if isinstance(node, ast.UnaryOp):
        operand = values[id(node.operand)]
        cost = float(_digits(operand.bits)) if operand.kind == "int" else 1.0
        return operand, cost
    if isinstance(node, ast.BinOp):
        return _binop(node, values[id(node.left)], values[id(node.right)])
    return _OTHER, 1.0  # a call of a number, an empty tuple: eval raises, or it is nothing


def expression_cost(tree: ast.AST) -> float:
    """The digit operations evaluating ``tree`` may cost at most, over every node. Raises
    ``OverflowError`` when an int on the way could pass ``MAX_BITS``."""
    values: dict[int, _Value] = {}
    total = 0.0
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:  # children before parents, without recursion (long sums are deep trees)
        node, ready = stack.pop()
        if not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in ast.iter_child_nodes(node))
            continue
        if isinstance(node, ast.Expression):
            values[id(node)] = values[id(node.body)]
            continue
        if isinstance(node, ast.expr_context | ast.operator | ast.unaryop):
            continue
        value, cost = _node(node, values)
        if value.kind == "int" and value.bits > MAX_BITS:
            raise OverflowError("int too large to convert to float")
        values[id(node)] = value
        total += cost
    return total


def check_expression_cost(tree: ast.AST, max_cost: float = MAX_COST) -> float:
    """``expression_cost(tree)``, or ``ValueError`` when it passes ``max_cost`` (and
    ``OverflowError`` for an int past ``MAX_BITS``)."""
    cost = expression_cost(tree)
    if cost > max_cost:
        raise ValueError(
            f"expression too costly to evaluate: up to {cost:.3g} digit operations, more than "
            f"the {max_cost:.3g} allowed; split it into smaller calculations"
        )
    return cost


__all__ = ["MAX_BITS", "MAX_COST", "check_expression_cost", "expression_cost"]
