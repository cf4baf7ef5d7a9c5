"""What a train run is asked to do (``TrainConfig``), what it reports (``TrainObserver``,
``TrainResult``), and which task each of its groups samples."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from envlab.core import Task, Trajectory
from envlab.runs.metrics import StepMetrics
from envlab.train.checkpoint import LoopState

GROUP_KEY = "train_group"
"""Key of ``trajectory.info``: the group's index in the run's sequence of groups."""


class TrainConfig(BaseModel):
    """How a train run schedules episodes and learner steps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    steps: int = Field(100, ge=1)
    """Learner steps to reach (a resumed run continues to this many)."""
    groups_per_step: int = Field(8, ge=1)
    group_size: int = Field(8, ge=2)
    """Samples per group (GRPO's ``num_generations``)."""
    max_staleness: int = Field(1, ge=0)
    """Oldest policy a sample may come from, in learner versions behind the current one."""
    sync: bool = False
    """Generate, then learn, then generate: no overlap (``max_staleness`` is 0)."""
    concurrency: int = Field(32, ge=1)
    """Episodes in flight at once."""
    checkpoint_every: int = Field(10, ge=1)
    checkpoint_every_s: float | None = Field(None, gt=0)
    """Also checkpoint after the first step that ends this many seconds after the last
    checkpoint (or the run's start): a slow run loses at most that much to a kill."""
    seed: int = 0

    @property
    def staleness_bound(self) -> int:
        return 0 if self.sync else self.max_staleness

    def identity(self) -> dict[str, object]:
        """What a resumed run must share with the original (``steps`` may grow)."""
        return self.model_dump(
            exclude={"steps", "concurrency", "checkpoint_every", "checkpoint_every_s"}
        )


class TrainObserver(Protocol):
    """Sees a run's progress (the CLI draws it; the loop draws nothing)."""

    def started(self, config: TrainConfig, state: LoopState) -> None: ...

    def episode(self, trajectory: Trajectory) -> None: ...

    def stepped(self, metrics: StepMetrics) -> None: ...


@dataclass(slots=True)
class TrainResult:
    run_dir: Path
    state: LoopState
    metrics: list[StepMetrics]
    plot: Path | None
    notes: list[str] = field(default_factory=list)


def task_for_group(tasks: Sequence[Task], seed: int, index: int) -> Task:
    """Group ``index``'s task: the tasks in a fresh seeded order every pass over them."""
    n = len(tasks)
    order = random.Random(f"envlab-train:{seed}:{index // n}").sample(range(n), n)
    return tasks[order[index % n]]
