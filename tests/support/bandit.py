"""A contextual bandit and a tabular learner for the train loop's tests (importable by path:
``envlab train tests.support.bandit:BanditEnv --learner tests.support.bandit:TableLearner``).

Each task hides its best arm; the agent answers one arm; the reward is 1 for the best arm and
0.2 for the other. ``TableLearner`` keeps one logit per (task, arm), trained by a group-relative
policy gradient: a real learner, small enough to test scheduling, staleness and resume."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from envlab.core import (
    Action,
    Agent,
    AgentFactory,
    AgentSpec,
    Component,
    EnvSpec,
    EpisodeContext,
    GradingContext,
    InfraError,
    Limits,
    Observation,
    Rubric,
    StepResult,
    Task,
    TaskSet,
    ToolEnv,
)
from envlab.train.learner import POLICY_VERSION, Group, group_advantages

ARMS = ("a", "b", "c")


def _pay(ctx: GradingContext) -> float:
    return 1.0 if ctx.final_answer == ctx.task.answer else 0.2


class BanditEpisode(ToolEnv):
    rubric = Rubric([Component("pay", _pay)])

    async def on_reset(self, task: Task, seed: int | None) -> None:
        cfg = self.spec.config
        assert isinstance(cfg, BanditConfig)
        if cfg.infra_every and seed is not None and seed % cfg.infra_every == 0:
            raise InfraError(f"sandbox for seed {seed} could not start")

    async def step(self, action: Action) -> StepResult:
        cfg = self.spec.config
        assert isinstance(cfg, BanditConfig)
        delay = cfg.slow_delay if self.task is not None and self.task.id in cfg.slow else 0.0
        await asyncio.sleep(cfg.delay + delay)
        return await super().step(action)


class BanditConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = 6
    delay: float = 0.0
    """Seconds every step takes (rollout latency)."""
    slow: tuple[str, ...] = ()
    """Task ids whose step takes ``slow_delay`` more."""
    slow_delay: float = 0.0
    infra_every: int = 0
    """Reset fails with ``InfraError`` for seeds divisible by this (0: never)."""


class BanditEnv(EnvSpec):
    """Pick the hidden best of three arms per task."""

    id = "bandit"
    Config = BanditConfig
    environment = BanditEpisode
    default_limits = Limits(max_steps=1)
    config: BanditConfig

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "train") -> TaskSet:
        count = n or self.config.n
        tasks = [
            Task(id=f"t{i}", prompt=f"task t{i}: answer a, b or c", answer=ARMS[(i * 7) % 3])
            for i in range(count)
        ]
        return TaskSet(tasks, seed=seed, name=self.id)


class TableAgent(Agent):
    name = "table"

    def __init__(self, logits: dict[str, float], version: int) -> None:
        self.logits, self.version = logits, version
        self._ctx: EpisodeContext | None = None

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="table-policy")

    async def start(self, ctx: EpisodeContext) -> None:
        self._ctx = ctx

    async def act(self, observation: Observation) -> Action:
        assert self._ctx is not None
        probs = _probs(self.logits, self._ctx.task_id)
        i = random.Random(self._ctx.seed).choices(range(len(ARMS)), weights=probs)[0]
        return Action(text=ARMS[i], info={"logprob": math.log(probs[i]), "choice": i})


class TableAgents(AgentFactory):
    def __init__(self, logits: dict[str, float], version: int) -> None:
        self.logits, self.version = dict(logits), version

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="table", harness="table-policy")

    def new_agent(self) -> Agent:
        return TableAgent(self.logits, self.version)


def _probs(logits: dict[str, float], task_id: str) -> list[float]:
    z = [logits.get(f"{task_id}:{a}", 0.0) for a in ARMS]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    return [v / sum(e) for v in e]


class TableLearner:
    """One logit per (task, arm); ``delay`` seconds of extra work per step (a slow learner).
    ``seen`` records, per step, the version before it and each sample's policy version,
    group index and status: what reached the learner."""

    def __init__(self, lr: float = 1.0, delay: float = 0.0, **_: Any) -> None:
        self.lr, self.delay = lr, float(delay)
        self.logits: dict[str, float] = {}
        self._version = 0
        self.seen: list[dict[str, Any]] = []
        self._busy = threading.Lock()

    @property
    def version(self) -> int:
        return self._version

    def policy(self) -> AgentFactory:
        return TableAgents(self.logits, self._version)

    def step(self, batch: Sequence[Group]) -> dict[str, float]:
        if not self._busy.acquire(blocking=False):
            raise AssertionError("step called concurrently with itself")
        try:
            if self.delay:
                time.sleep(self.delay)
            self.seen.append(
                {
                    "version": self._version,
                    "samples": [
                        (g.index, int(t.info[POLICY_VERSION]), t.status.value, t.episode_id)
                        for g in batch
                        for t in g.trajectories
                    ],
                }
            )
            for g in batch:
                for t, adv in zip(g.trajectories, group_advantages(g.rewards), strict=True):
                    if not t.steps:  # cut before its first action (a timeout): nothing to credit
                        continue
                    key = f"{t.task_id}:{t.steps[-1].action.text}"
                    self.logits[key] = self.logits.get(key, 0.0) + self.lr * adv / len(batch)
            self._version += 1
            return {"groups": float(len(batch))}
        finally:
            self._busy.release()

    def state_dict(self) -> dict[str, Any]:
        return {"logits": dict(self.logits), "version": self._version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.logits = {str(k): float(v) for k, v in state["logits"].items()}
        self._version = int(state["version"])
