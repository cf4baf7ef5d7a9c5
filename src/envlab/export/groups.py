"""The first pass over a run: which episodes count, how they group, and each group's statistics.

Only scored episodes (``Trajectory.scored``: status not ``infra_error``/``env_error`` and a
reward) enter a group; the others are dropped and counted by status, never scored 0. A group's
advantage of an episode is ``(reward - mean) / (std + eps)`` over the group's scored rewards,
with ``std`` the sample standard deviation (Bessel's correction, n - 1), as TRL, verl,
slime/Miles and SkyRL compute it. A group whose rewards are all equal (or that holds one
scored episode) carries no signal: it is *dead*, its advantages are exactly 0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from envlab.runs import RunDir

DEFAULT_EPS = 1e-6
"""What verl, slime/Miles and SkyRL add to the std (TRL adds 1e-4)."""


@dataclass(slots=True, frozen=True)
class Member:
    """What the first pass keeps of one scored episode."""

    episode_id: str
    sample_index: int
    reward: float
    has_tokens: bool


@dataclass(slots=True)
class Group:
    """The scored episodes of one group (one task, ``samples`` samples), and their statistics."""

    group_id: str
    task_id: str
    members: list[Member] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [m.reward for m in self.members]

    @property
    def mean(self) -> float:
        r = self.rewards
        return math.fsum(r) / len(r)

    @property
    def std(self) -> float:
        """Sample standard deviation (n - 1); 0 for a group of one."""
        r = self.rewards
        if len(r) < 2:
            return 0.0
        mu = self.mean
        return math.sqrt(math.fsum((x - mu) ** 2 for x in r) / (len(r) - 1))

    @property
    def dead(self) -> bool:
        """No reward variance (every reward equal, or one scored episode): no GRPO signal."""
        r = self.rewards
        return len(r) < 2 or max(r) == min(r)

    def advantage(self, reward: float, eps: float = DEFAULT_EPS) -> float:
        if self.dead:
            return 0.0
        return (reward - self.mean) / (self.std + eps)

    def best(self) -> Member:
        """The highest reward; ties go to the lowest sample index."""
        return min(self.members, key=lambda m: (-m.reward, m.sample_index))

    def worst(self) -> Member:
        """The lowest reward; ties go to the lowest sample index."""
        return min(self.members, key=lambda m: (m.reward, m.sample_index))


@dataclass(slots=True)
class RunScan:
    """The groups of a run (scored episodes only) and what was dropped before grouping."""

    n_episodes: int = 0
    groups: dict[str, Group] = field(default_factory=dict)
    unscored: Counter[str] = field(default_factory=Counter)
    """Episodes dropped because they were not scored, by status (``infra_error``, ...)."""

    @property
    def n_unscored(self) -> int:
        return sum(self.unscored.values())

    @property
    def dead_groups(self) -> list[str]:
        return [g.group_id for g in self.groups.values() if g.dead]

    _index: dict[str, Group] = field(default_factory=dict, repr=False)

    def group_of(self, episode_id: str) -> Group | None:
        return self._index.get(episode_id)

    def add(self, group_id: str, task_id: str, member: Member) -> None:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, task_id)
        group.members.append(member)
        self._index[member.episode_id] = group


def scan_run(run: RunDir) -> RunScan:
    """Read ``run`` once (long message strings left as references) and group its episodes."""
    scan = RunScan()
    for traj in run.store.iter(messages=False):
        scan.n_episodes += 1
        if not traj.scored:
            why = (
                traj.status.value if not traj.status.scored else f"{traj.status.value} (no reward)"
            )
            scan.unscored[why] += 1
            continue
        assert traj.reward is not None  # scored implies a reward
        tokens = traj.tokens is not None and bool(traj.tokens.turn_starts)
        scan.add(
            traj.group_id,
            traj.task_id,
            Member(traj.episode_id, traj.sample_index, float(traj.reward), tokens),
        )
    return scan
