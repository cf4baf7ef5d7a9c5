"""``calc``: reach a target with calculator tools; reward for the answer and for using the tools."""

from __future__ import annotations

import random

from envlab.core import Action, Component, Rubric, Task, TaskSet, ToolCall, ToolCallError, ToolEnv
from envlab.core.tools import tool
from envlab.envs.answers import extract_number, format_number, numbers_equal

OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _apply(op: str, a: float, b: float) -> float:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    return a / b


def _num(x: float) -> float:
    """Integral floats as ints, so schemas and transcripts show ``9``, not ``9.0``."""
    return int(x) if float(x).is_integer() else x


def _make_problem(
    r: random.Random, n_ops: int
) -> tuple[str, float, list[tuple[str, float, float]]]:
    """An expression built left to right: ((x op y) op z) ..., exact division only."""
    value = float(r.randint(2, 30))
    expr = format_number(value)
    steps: list[tuple[str, float, float]] = []
    for _ in range(n_ops):
        op = r.choice(list(OPS))
        if op == "div":
            divisors = [d for d in range(2, 10) if value % d == 0]
            if not divisors:
                op = "mul"
        if op == "div":
            b = float(r.choice(divisors))
        elif op == "mul":
            b = float(r.randint(2, 9))
        else:
            b = float(r.choice([x for x in range(2, 21) if x != value]))
        steps.append((op, _num(value), _num(b)))
        value = _apply(op, value, b)
        expr = f"({expr} {OPS[op]} {format_number(b)})"
    return expr[1:-1] if n_ops else expr, value, steps


def _answer(env: CalcEnv) -> float | None:
    """The agent's final number; text it copied from the prompt (the expression) is not one."""
    assert env.task is not None
    return extract_number(env.final_answer, not_from=[env.task.prompt, env.system_prompt()])


def _correct(env: CalcEnv) -> float:
    assert env.task is not None
    return float(numbers_equal(_answer(env), float(env.task.answer)))


def _computed_with_tools(env: CalcEnv) -> float:
    """1 if a tool call produced the final answer: the agent computed it, it did not guess."""
    got = _answer(env)
    return float(
        got is not None
        and any(numbers_equal(got, r) for r in env.results)
        and numbers_equal(got, float(env.task.answer if env.task else "nan"))
    )


class CalcEnv(ToolEnv):
    """Compute an expression with ``add/sub/mul/div`` tools, then answer with the number."""

    id = "calc"
    description = "Reach a target with add/sub/mul/div tools; answer + tool-use reward."
    max_steps = 12
    rubric = Rubric(
        [
            Component("correct", _correct, weight=0.8, description="final number is the target"),
            Component(
                "computed_with_tools",
                _computed_with_tools,
                weight=0.2,
                description="a tool call returned the final answer",
            ),
        ]
    )

    def __init__(self, min_ops: int = 1, max_ops: int = 3, size: int = 1000) -> None:
        super().__init__()
        if not 1 <= min_ops <= max_ops:
            raise ValueError(f"need 1 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
        self.min_ops, self.max_ops, self.size = min_ops, max_ops, size
        self.results: list[float] = []

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.results = []

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = []
        for i in range(self.size if n is None else n):
            r = random.Random(f"calc:{split}:{seed}:{i}")
            expr, value, steps = _make_problem(r, r.randint(self.min_ops, self.max_ops))
            tasks.append(
                Task(
                    id=f"calc-{split}-{seed}-{i:05d}",
                    prompt=(
                        f"Compute {expr} using the calculator tools (one tool call per operation). "
                        "When you have the result, reply with just the final number."
                    ),
                    answer=value,
                    metadata={"expression": expr, "steps": steps, "n_ops": len(steps)},
                    split=split,
                )
            )
        return TaskSet(tasks, seed=seed, name=self.id)

    def system_prompt(self) -> str:
        return (
            "You are a careful calculator user. Call the tools add, sub, mul and div to do every "
            "arithmetic step. After the last step, reply with only the final number."
        )

    def oracle_actions(self, task: Task) -> list[Action]:
        actions = [
            Action(tool_calls=[ToolCall(op, {"a": a, "b": b}, id=f"oracle_{i}")])
            for i, (op, a, b) in enumerate(task.metadata["steps"])
        ]
        return [*actions, Action(text=format_number(float(task.answer)))]

    def _record(self, value: float) -> str:
        self.results.append(value)
        return format_number(value)

    @tool
    def add(self, a: float, b: float) -> str:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return self._record(a + b)

    @tool
    def sub(self, a: float, b: float) -> str:
        """Subtract b from a.

        Args:
            a: The number to subtract from.
            b: The number to subtract.
        """
        return self._record(a - b)

    @tool
    def mul(self, a: float, b: float) -> str:
        """Multiply two numbers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        return self._record(a * b)

    @tool
    def div(self, a: float, b: float) -> str:
        """Divide a by b.

        Args:
            a: The dividend.
            b: The divisor (not zero).
        """
        if b == 0:
            raise ToolCallError("division by zero; b must not be 0")
        return self._record(a / b)
