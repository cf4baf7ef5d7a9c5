"""Misbehaving parties for the red-team tests of the train loop: agents that raise, return
malformed actions, run out of time or raise ``InfraError`` themselves on chosen tasks; a learner
that can lie (rewrites the trajectories it is given, flips its policy's spec to privileged after
the loop's check, keeps an object in its state that no checkpoint reader accepts); and a bandit
whose environment fails on some seeds (``env_error``).

Everything here is real: the agents run through the real engine, the learner is a real tabular
policy gradient (``tests.support.bandit``), the env is the bandit with one more failure."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from typing import Any, ClassVar

from envlab.core import (
    Action,
    Agent,
    AgentFactory,
    AgentSpec,
    EpisodeContext,
    InfraError,
    Observation,
    StepResult,
)
from envlab.train.learner import POLICY_VERSION, Group, group_advantages
from tests.support.bandit import ARMS, BanditConfig, BanditEnv, BanditEpisode, _probs

MODES = ("raise", "malformed", "timeout", "infra", "none")


class RogueAgent(Agent):
    """The tabular policy of ``TableAgent``, misbehaving (``mode``) on the tasks in ``bad``;
    with the task in its context (a privileged run) it answers the hidden answer."""

    name = "rogue"
    saw_task: ClassVar[list[str]] = []
    """Task ids whose hidden answer the engine handed to an agent of this class."""

    def __init__(self, logits: dict[str, float], mode: str, bad: frozenset[str]) -> None:
        self.logits, self.mode, self.bad = logits, mode, bad
        self._ctx: EpisodeContext | None = None

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="rogue")

    async def start(self, ctx: EpisodeContext) -> None:
        self._ctx = ctx
        if ctx.task is not None:
            RogueAgent.saw_task.append(ctx.task_id)

    async def act(self, observation: Observation) -> Action:
        ctx = self._ctx
        assert ctx is not None
        if ctx.task is not None:  # handed the hidden answer: use it
            return Action(text=str(ctx.task.answer), info={"logprob": 0.0})
        if ctx.task_id in self.bad:
            if self.mode == "raise":
                raise ValueError("the agent's own bug")
            if self.mode == "malformed":
                return {"text": "a"}  # type: ignore[return-value]
            if self.mode == "timeout":
                await asyncio.sleep(30)
            if self.mode == "infra":
                raise InfraError("the model server is unreachable (said the agent)")
        probs = _probs(self.logits, ctx.task_id)
        i = random.Random(ctx.seed).choices(range(len(ARMS)), weights=probs)[0]
        return Action(text=ARMS[i], info={"logprob": math.log(probs[i]), "choice": i})


class RogueAgents(AgentFactory):
    """The factory over a snapshot of the logits. With ``flip``, its spec says privileged=False
    the first time it is read (the loop's check) and privileged=True every time after (what
    the engine reads when it starts each episode)."""

    def __init__(
        self, logits: dict[str, float], mode: str, bad: frozenset[str], flip: bool
    ) -> None:
        self.logits, self.mode, self.bad, self.flip = dict(logits), mode, bad, flip
        self._reads = 0

    @property
    def spec(self) -> AgentSpec:
        self._reads += 1
        privileged = self.flip and self._reads > 1
        return AgentSpec(name="rogue", harness="rogue", privileged=privileged)

    def new_agent(self) -> Agent:
        return RogueAgent(self.logits, self.mode, self.bad)


class Unreadable:
    """A value no ``torch.load(weights_only=True)`` accepts (a class of this module)."""

    def __init__(self, n: int = 0) -> None:
        self.n = n


class RogueLearner:
    """A tabular group-relative policy gradient (as ``TableLearner``) whose agents misbehave on
    ``bad`` tasks. It learns from samples with no action too (their reward counts in the group's
    mean). ``mutate``: after learning, it rewrites every trajectory it was given (reward 1.0,
    policy version = its own). ``flip``: its policy's spec turns privileged after the loop's
    check. ``unreadable``: its state holds an ``Unreadable``. ``seen`` records, per step, each
    sample's (task, status, reward, episode id) as the learner received them."""

    def __init__(
        self,
        mode: str = "none",
        bad: Sequence[str] = ("t0",),
        *,
        mutate: bool = False,
        flip: bool = False,
        unreadable: bool = False,
        lr: float = 1.0,
    ) -> None:
        assert mode in MODES, mode
        self.mode, self.bad = mode, frozenset(bad)
        self.mutate, self.flip, self.unreadable, self.lr = mutate, flip, unreadable, lr
        self.logits: dict[str, float] = {}
        self._version = 0
        self.seen: list[list[tuple[str, str, float | None, str]]] = []

    @property
    def version(self) -> int:
        return self._version

    def policy(self) -> AgentFactory:
        return RogueAgents(self.logits, self.mode, self.bad, self.flip)

    def step(self, batch: Sequence[Group]) -> dict[str, float]:
        self.seen.append(
            [
                (t.task_id, t.status.value, t.reward, t.episode_id)
                for g in batch
                for t in g.trajectories
            ]
        )
        for g in batch:
            for t, adv in zip(g.trajectories, group_advantages(g.rewards), strict=True):
                if t.steps:  # a sample without an action pushes no arm, but counts in the mean
                    key = f"{t.task_id}:{t.steps[-1].action.text}"
                    self.logits[key] = self.logits.get(key, 0.0) + self.lr * adv / len(batch)
        self._version += 1
        if self.mutate:
            for g in batch:
                for t in g.trajectories:
                    t.reward = 1.0
                    t.info[POLICY_VERSION] = self._version
        return {"groups": float(len(batch))}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"logits": dict(self.logits), "version": self._version}
        if self.unreadable:
            state["extra"] = Unreadable(self._version)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.logits = {str(k): float(v) for k, v in state["logits"].items()}
        self._version = int(state["version"])


class FailingConfig(BanditConfig):
    env_error_every: int = 0
    """The environment's step raises (a bug of the environment) for seeds divisible by this."""


class FailingEpisode(BanditEpisode):
    async def step(self, action: Action) -> StepResult:
        cfg = self.spec.config
        assert isinstance(cfg, FailingConfig)
        if cfg.env_error_every and self.seed is not None and self.seed % cfg.env_error_every == 0:
            raise RuntimeError(f"the environment's own bug at seed {self.seed}")
        return await super().step(action)


class FailingBanditEnv(BanditEnv):
    """The bandit, whose step fails (``env_error``) for some seeds."""

    id = "failing-bandit"
    Config = FailingConfig
    environment = FailingEpisode
    config: FailingConfig


def bandit_reward(task_id: str, answer: str) -> float:
    """What the bandit's grader gives ``answer`` on ``task_id`` (``t{i}``'s best arm is
    ``ARMS[(i * 7) % 3]``): 1.0 for the best arm, 0.2 otherwise."""
    i = int(task_id.removeprefix("t"))
    return 1.0 if answer == ARMS[(i * 7) % 3] else 0.2
