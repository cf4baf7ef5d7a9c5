"""``calc``: reach a target with calculator tools; reward for the answer and for using the tools."""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envlab.core import (
    Action,
    Component,
    ConfigError,
    EnvSpec,
    GradingContext,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolCall,
    ToolCallError,
    ToolEnv,
)
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


SYSTEM_PROMPT = (
    "You are a careful calculator user. Call the tools add, sub, mul and div to do every "
    "arithmetic step. After the last step, reply with only the final number."
)


def _answer(ctx: GradingContext) -> float | None:
    """The agent's final number; text it copied from the prompt (the expression) is not one."""
    return extract_number(ctx.final_answer, not_from=[ctx.task.prompt, SYSTEM_PROMPT])


def _correct(ctx: GradingContext) -> float:
    return float(numbers_equal(_answer(ctx), float(ctx.task.answer)))


def _computed_with_tools(ctx: GradingContext) -> float:
    """1 if a tool call produced the final answer: the agent computed it, it did not guess."""
    got = _answer(ctx)
    return float(
        got is not None
        and any(numbers_equal(got, r) for r in ctx.state["results"])
        and numbers_equal(got, float(ctx.task.answer))
    )


class CalcEpisode(ToolEnv):
    """One expression to compute with ``add/sub/mul/div`` tools, answered with the number."""

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

    def __init__(self, spec: EnvSpec | None = None) -> None:
        super().__init__(spec)
        self.results: list[float] = []

    def state(self) -> dict[str, Any]:
        return {**super().state(), "results": list(self.results)}

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

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


class CalcConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    min_ops: int = Field(1, ge=1)
    max_ops: int = Field(3, ge=1)
    size: int = Field(1000, ge=1)

    @model_validator(mode="after")
    def _ops_in_order(self) -> CalcConfig:
        if self.min_ops > self.max_ops:
            raise ConfigError(f"need min_ops <= max_ops, got {self.min_ops}, {self.max_ops}")
        return self


class CalcEnv(EnvSpec):
    """Compute an expression with ``add/sub/mul/div`` tools, then answer with the number."""

    id = "calc"
    description = "Reach a target with add/sub/mul/div tools; answer + tool-use reward."
    Config = CalcConfig
    environment = CalcEpisode
    default_limits = Limits(max_steps=12)
    config: CalcConfig

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        cfg = self.config
        tasks = []
        for i in range(cfg.size if n is None else n):
            r = random.Random(f"calc:{split}:{seed}:{i}")
            expr, value, steps = _make_problem(r, r.randint(cfg.min_ops, cfg.max_ops))
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
