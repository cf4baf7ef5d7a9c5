"""The learner plug-in of ``envlab.train.loop``: what the loop asks of whatever it trains.

The loop owns the episodes (rollout workers, groups, staleness, checkpoints, metrics); a
``Learner`` owns the weights. Two ship with envlab: ``envlab.train.decision.DecisionLearner``
(a small policy trained from scratch, for decision environments such as ``triage``) and
``envlab.train.lm_learner.LMLearner`` (a ``transformers`` causal LM, trained from the
trajectories' token views). Anything with the same four members can be driven by the loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from envlab.core import AgentFactory, Trajectory

POLICY_VERSION = "policy_version"
"""Key of ``trajectory.info``: the learner version whose weights acted in the episode."""


@dataclass(frozen=True, slots=True)
class Group:
    """The samples of one task that reach the learner together (a GRPO group).

    Only trajectories with a valid grade are in ``trajectories`` (``trajectory.scored``): an
    ``infra_error`` or ``env_error`` never enters a batch. ``version`` is the oldest policy
    version among them; the loop hands no group older than its staleness bound."""

    index: int
    """The group's position in the run's sequence of groups (deterministic from the seed)."""
    group_id: str
    task_id: str
    version: int
    trajectories: tuple[Trajectory, ...]

    @property
    def rewards(self) -> list[float]:
        return [float(t.reward) for t in self.trajectories if t.reward is not None]

    @property
    def dead(self) -> bool:
        """Every sample got the same reward: a group-relative advantage of zero, no signal."""
        r = self.rewards
        return len(r) < 2 or max(r) - min(r) <= 1e-12


def group_advantages(rewards: Sequence[float], *, scale: bool = True) -> list[float]:
    """GRPO's advantage: each reward minus the group's mean, divided by the group's standard
    deviation when ``scale`` (Dr. GRPO: ``scale=False``); all zeros for a dead group."""
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    centred = [r - mean for r in rewards]
    if not scale:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / n)
    return [0.0 if std <= 1e-12 else c / std for c in centred]


@runtime_checkable
class Learner(Protocol):
    """What the loop drives.

    ``version`` counts the optimizer steps taken (0 before the first). ``policy()`` returns an
    agent factory acting with a snapshot of the current weights: later steps must not change
    the agents it makes, so that a trajectory's ``policy_version`` is the truth. ``step`` runs
    one optimizer step on a batch of groups and returns its metrics (floats); the loop calls it
    in a worker thread while rollouts go on, and never concurrently with itself or with
    ``state_dict``. ``state_dict``/``load_state_dict`` hold everything a resumed run needs
    (weights, optimizer state, random generators, ``version``), as values ``torch.save`` writes
    and ``torch.load(weights_only=True)`` reads back (tensors, numbers, strings, lists, dicts).
    """

    @property
    def version(self) -> int: ...

    def policy(self) -> AgentFactory: ...

    def step(self, batch: Sequence[Group]) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
