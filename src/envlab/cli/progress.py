"""A rich progress bar with live pass rate and error counts."""

from __future__ import annotations

from collections import Counter
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from envlab.core import EpisodeRecord, Status


class RolloutProgress:
    """Shows episodes done, pass rate over scored episodes, and every non-ok status."""

    def __init__(
        self, total: int, *, done: int = 0, pass_threshold: float = 1.0, enabled: bool = True
    ) -> None:
        self.pass_threshold = pass_threshold
        self.counts: Counter[str] = Counter()
        self.passed = 0
        self.scored = 0
        self.enabled = enabled
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not enabled,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("episodes", total=total, completed=done, stats="")

    def seed_from(self, records: list[EpisodeRecord]) -> None:
        for r in records:
            self._count(r)

    def _count(self, rec: EpisodeRecord) -> None:
        self.counts[rec.status] += 1
        if rec.scored:
            self.scored += 1
            self.passed += rec.reward is not None and rec.reward >= self.pass_threshold - 1e-9

    def update(self, traj: EpisodeRecord) -> None:
        self._count(traj)
        if not self.enabled:
            return
        rate = f"pass {self.passed / self.scored:.1%}" if self.scored else "pass -"
        errs = " ".join(
            f"{s.value}={self.counts[s.value]}"
            for s in Status
            if s is not Status.OK and self.counts[s.value]
        )
        self._progress.update(self._task, advance=1, stats=f"{rate} {errs}".strip())

    def __enter__(self) -> RolloutProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()
