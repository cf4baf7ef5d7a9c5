"""Environments and agents with controlled failures, for engine tests (importable by path)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from envlab.core import (
    Action,
    Agent,
    AgentSpec,
    Component,
    InfraError,
    Observation,
    Rubric,
    Task,
    TaskSet,
    ToolEnv,
)
from envlab.core.tools import tool
from envlab.envs.arith import ArithEnv


class SlowArith(ArithEnv):
    """``arith`` whose every step takes ``delay`` seconds (for crash/resume tests)."""

    def __init__(self, delay: float = 0.02, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.delay = delay

    async def step(self, action: Action):  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.delay)
        return await super().step(action)


def _answered(env: EchoEnv) -> float:
    return float(env.final_answer == "ok")


class EchoEnv(ToolEnv):
    """A tool env whose behaviour each test sets: sleeps, crashes, typed tools."""

    id = "echo"
    max_steps = 5
    rubric = Rubric([Component("answered_ok", _answered)])

    def __init__(self, mode: str = "normal", n: int = 3) -> None:
        super().__init__()
        self.mode, self.n = mode, n

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [Task(id=f"echo-{i}", prompt="say ok", answer="ok") for i in range(n or self.n)]
        )

    async def on_reset(self, task: Task, seed: int | None) -> None:
        if self.mode == "reset_crash":
            raise RuntimeError("broken reset")

    @tool
    def repeat(self, text: str, times: int = 1) -> str:
        """Repeat a text.

        Args:
            text: What to repeat.
            times: How many times.
        """
        return text * times

    @tool
    async def wait(self, seconds: float) -> str:
        """Sleep, then say done.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return "done"

    @tool
    def explode(self) -> str:
        """Raise an exception inside the environment."""
        raise ValueError("kaboom")


class ScriptAgent(Agent):
    """Plays a fixed list of actions; raises what it is told to raise."""

    name = "script"

    def __init__(self, actions: list[Action], raise_on_act: BaseException | None = None) -> None:
        self.actions = list(actions)
        self.raise_on_act = raise_on_act

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name)

    async def act(self, observation: Observation) -> Action:
        if self.raise_on_act is not None:
            raise self.raise_on_act
        return self.actions.pop(0) if self.actions else Action(text="ok")


class FlakyTransportAgent(Agent):
    """Fails with ``InfraError`` on its first ``failures`` calls across all episodes."""

    name = "flaky"
    calls: ClassVar[dict[str, int]] = {}

    def __init__(self, failures: int, key: str) -> None:
        self.failures, self.key = failures, key

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name)

    async def act(self, observation: Observation) -> Action:
        n = FlakyTransportAgent.calls.get(self.key, 0) + 1
        FlakyTransportAgent.calls[self.key] = n
        if n <= self.failures:
            raise InfraError(f"connection reset (call {n})")
        return Action(text="ok")
