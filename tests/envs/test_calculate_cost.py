"""τ's ``calculate`` is priced as a whole expression before it runs (``core.arith_cost``): a
5 KB expression of costly parts, each under the old per-operand size check and hidden under a
true division, is refused at once as the agent's tool error; normal expressions answer exactly
as τ-bench's ``round(float(eval(expr)), 2)``. ``calc``'s tools take floats: nothing in them
grows with the input, and a number too long to read is the agent's malformed call."""

from __future__ import annotations

import ast
import random

import pytest

from envlab.core import Action, ToolCall
from envlab.core.arith_cost import MAX_BITS, MAX_COST, check_expression_cost, expression_cost
from envlab.envs.calc import CalcEnv
from envlab.envs.tau.common import CommonTools
from envlab.envs.tau.spec import TauRetail

TERM = "255**124999//255**62499/255**62500"
"""About 0.3 s of CPU on its own (a quadratic long division of a million-bit number), under
every per-operand bound (no int past a million bits), and a float in the end (~1.0)."""
HOSTILE = " + ".join([TERM] * (5000 // (len(TERM) + 3)))
"""Close to 5 KB: a minute of CPU holding the GIL under the old check, which looked at each
operand alone and at nothing above a true division."""


def _taus_calculate(expression: str) -> str:
    """τ-bench's calculate, the reference (only on expressions that end quickly)."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        return "Error: invalid characters in expression"
    try:
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as e:
        return f"Error: {e}"


def _calculate(expression: str) -> str:
    try:
        return CommonTools().calculate(expression)
    except Exception as e:
        return f"Error: {e}"


def _cost(expression: str) -> float:
    return expression_cost(ast.parse(expression, mode="eval"))


def test_the_hostile_expression_is_priced_as_a_whole() -> None:
    assert len(HOSTILE) > 4900
    tree = ast.parse(TERM, mode="eval")
    assert expression_cost(tree) > MAX_COST  # one term is already past the budget
    # each part is under the size bound (what the old check looked at) ...
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            assert 8 * node.right.value <= MAX_BITS  # type: ignore[attr-defined]
    # ... and the whole costs at least the sum of its parts
    assert _cost(HOSTILE) >= HOSTILE.count(TERM) * _cost(TERM)
    with pytest.raises(ValueError, match="too costly"):
        check_expression_cost(ast.parse(HOSTILE, mode="eval"))


async def test_the_hostile_calculate_is_refused_as_the_agents_tool_error() -> None:
    spec = TauRetail()
    env = spec.new_episode()
    await env.reset(spec.tasks(n=1)[0], 0)
    try:
        calls = [ToolCall("calculate", {"expression": e}, id=e[:5]) for e in (HOSTILE, "2 + 2")]
        result = await env.step(Action(tool_calls=calls))
        hostile, after = result.observation.tool_results
        assert hostile.is_error and hostile.content.startswith("Error: expression too costly")
        assert after.content == "4.0"  # an ordinary refusal: the episode goes on
        assert not result.done and "tool_overrun" not in result.info
    finally:
        await env.close()


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("9 ** 9 ** 9", "Error: int too large to convert to float"),  # τ-bench's own text
        ("2 ** 999999 * 2 ** 999999", "Error: int too large to convert to float"),
        ("255 ** 124999 // 255 ** 62499", "Error: expression too costly"),
        ("(255 ** 3000) ** 40", "Error: expression too costly"),
    ],
)
def test_costly_expressions_are_refused_at_once(expression: str, answer: str) -> None:
    assert _calculate(expression).startswith(answer)


def _realistic(r: random.Random, depth: int = 0) -> str:
    """An expression an agent writes: prices, quantities, percentages, parentheses."""
    if depth > 2 or r.random() < 0.3:
        return r.choice(
            [str(r.randint(0, 500)), f"{r.uniform(0, 1000):.2f}", f"0.{r.randint(1, 99):02d}"]
        )
    op = r.choice([" + ", " - ", " * ", " / ", " // ", " ** "])
    left, right = _realistic(r, depth + 1), _realistic(r, depth + 1)
    if op == " ** ":  # a small power of a bracketed base (no tower: τ-bench would hang)
        return f"({left}) ** {r.randint(0, 12)}"
    return f"({left}{op}{right})" if r.random() < 0.5 else f"{left}{op}{right}"


_NORMAL = [
    "2 + 2", "(1200 - 2 * 50) / 3", "2 ** 10", "2 ** 2000 / 2 ** 1990", "-(2 ** 3) // 3",
    "1 / 0", "2 ** 2000", "2 ** 0.5 ** -1", "(2)(3)", "()", "...", "(-8) ** 0.5", "10 ** -2",
    "0 ** -1", "10 ** 400", "10.0 ** 400", "4 // 0", "1 / 3 * 3", "--1", "+-+2 ** 2",
    "99.99 * 3 + 12.5 - 7", "(1 + 0.08) ** 12 * 1000", "2 ** 64 * 2 ** 64 // 3",
    "123456789 * 987654321 / 7", "1" * 300 + " / " + "3" * 299, "2 ** 1000 // 3 ** 500",
]  # fmt: skip


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
def test_normal_expressions_answer_as_tau_bench() -> None:
    r = random.Random(7)
    corpus = _NORMAL + [_realistic(r) for _ in range(400)]
    for expression in corpus:
        assert _calculate(expression) == _taus_calculate(expression), expression


async def test_a_number_too_long_to_read_is_the_agents_malformed_call() -> None:
    spec = CalcEnv()
    env = spec.new_episode()
    await env.reset(spec.tasks(n=1)[0])
    calls = [
        ToolCall("mul", '{"a": %s, "b": 2}' % ("9" * 5000), id="long"),
        ToolCall("mul", {"a": 1e308, "b": 1e308}, id="inf"),
    ]
    long, inf = (await env.step(Action(tool_calls=calls))).observation.tool_results
    assert long.is_error and "could not be read" in long.content
    assert inf.content == "inf" and not inf.is_error  # floats: nothing grows with the input
