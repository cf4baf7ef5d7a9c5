"""Environments and agents with controlled failures, for engine tests (importable by path)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from pydantic import BaseModel

from envlab.core import (
    Action,
    Agent,
    AgentFactory,
    AgentSpec,
    Component,
    EnvSpec,
    GradingContext,
    Limits,
    ModelUnavailable,
    Observation,
    Rubric,
    StepResult,
    Task,
    TaskSet,
    ToolEnv,
)
from envlab.core.tools import tool
from envlab.envs.arith import ArithConfig, ArithEnv, ArithEpisode


class SlowArithEpisode(ArithEpisode):
    async def step(self, action: Action) -> StepResult:
        assert isinstance(self.spec, SlowArith)
        await asyncio.sleep(self.spec.config.delay)
        return await super().step(action)


class SlowArithConfig(ArithConfig):
    delay: float = 0.02


class SlowArith(ArithEnv):
    """``arith`` whose every step takes ``delay`` seconds (for crash/resume tests)."""

    Config = SlowArithConfig
    environment = SlowArithEpisode
    config: SlowArithConfig


def _answered(ctx: GradingContext) -> float:
    return float(ctx.final_answer == "ok")


class EchoEpisode(ToolEnv):
    """A tool episode whose behaviour each test sets: sleeps, crashes, typed tools."""

    rubric = Rubric([Component("answered_ok", _answered)])

    async def on_reset(self, task: Task, seed: int | None) -> None:
        assert isinstance(self.spec, EchoEnv)
        if self.spec.config.mode == "reset_crash":
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


class EchoConfig(BaseModel):
    mode: str = "normal"
    n: int = 3


class EchoEnv(EnvSpec):
    """The spec of ``EchoEpisode``."""

    id = "echo"
    Config = EchoConfig
    environment = EchoEpisode
    default_limits = Limits(max_steps=5)
    config: EchoConfig

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [Task(id=f"echo-{i}", prompt="say ok", answer="ok") for i in range(n or self.config.n)]
        )


class Given(AgentFactory):
    """The factory of one agent object the test already made (one episode's worth)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    @property
    def spec(self) -> AgentSpec:
        return self.agent.spec

    def new_agent(self) -> Agent:
        return self.agent


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
    """Fails with ``ModelUnavailable`` (the model transport's infra error) on its first
    ``failures`` calls across all episodes."""

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
            raise ModelUnavailable(f"connection reset (call {n})")
        return Action(text="ok")
