"""The tools both τ domains share, as τ-bench has them: ``calculate`` and
``transfer_to_human_agents`` (after which the episode ends)."""

from __future__ import annotations

import ast

from envlab.core import ToolCallError
from envlab.core.arith_cost import check_expression_cost
from envlab.core.tools import tool
from envlab.envs.tau.tools import Text

_CALC_CHARS = frozenset("0123456789+-*/(). ")


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
    def transfer_to_human_agents(self, summary: Text) -> str:
        """Transfer the user to a human agent, with a summary of the user's issue. Only transfer if
        the user explicitly asks for a human agent, or if the user's issue cannot be resolved by the
        agent with the available tools.

        Args:
            summary: A summary of the user's issue.
        """
        return "Transfer successful"


def _check_size(expression: str) -> None:
    """Refuse an expression whose evaluation could cost more than a calculator should: the
    whole syntax tree priced at once (``envlab.core.arith_cost``: big-int sizes and the digit
    operations of every node, divisions, powers and their total), so a power tower is
    τ-bench's own ``OverflowError`` at once and a sum of many costly parts is refused too; what
    does not parse is left to ``eval``, which raises the same error τ-bench shows."""
    try:
        tree = ast.parse(expression.lstrip(" \t"), "<string>", "eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    check_expression_cost(tree)
