"""``envlab train``'s live progress: a ``TrainObserver`` drawn with rich (steps, reward,
staleness, dead groups, episodes per second, what was dropped and why)."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envlab.cli.console import err
from envlab.core import Trajectory

if TYPE_CHECKING:
    from envlab.runs.metrics import StepMetrics
    from envlab.train.checkpoint import LoopState
    from envlab.train.config import TrainConfig


class TrainProgress:
    """A bar of learner steps with the last step's numbers; with ``enabled=False`` silent."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.episodes = 0
        self.smoothed: float | None = None
        self._progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=err(),
            disable=not enabled,
            transient=False,
        )
        self._task = self._progress.add_task("train", total=None, stats="starting")

    def __enter__(self) -> TrainProgress:
        self._progress.__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.__exit__(et, ev, tb)

    def started(self, config: TrainConfig, state: LoopState) -> None:
        self.episodes = state.episodes
        self._progress.update(self._task, total=config.steps, completed=state.step)

    def episode(self, trajectory: Trajectory) -> None:
        self.episodes += 1

    def stepped(self, m: StepMetrics) -> None:
        a = 0.1
        self.smoothed = m.reward_mean if self.smoothed is None else (
            (1 - a) * self.smoothed + a * m.reward_mean
        )  # fmt: skip
        hist = " ".join(f"{k}:{v}" for k, v in m.staleness.items())
        stats = (
            f"reward {m.reward_mean:.3f} (avg {self.smoothed:.3f})  staleness {hist}  "
            f"dead {m.dead_groups:.0%}  {m.episodes_per_s:.0f} ep/s  "
            f"dropped {m.dropped_stale} stale, {m.dropped_groups} groups; "
            f"{m.excluded_samples} excluded"
        )
        self._progress.update(self._task, completed=m.step, stats=stats)
