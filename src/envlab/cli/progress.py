"""The CLI's progress bar: a ``RunObserver`` (``envlab.rollout``) drawn with rich.

The engine draws nothing; ``eval`` hands this observer to ``rollout(...)``, and ``task run|check``
feed it from ``run_episodes(..., on_trajectory=...)``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from envlab.cli.console import err
from envlab.core import EpisodeRecord, Status, Trajectory
from envlab.measure import is_pass

if TYPE_CHECKING:
    from envlab.rollout import PlannedEpisode


LOG_EVERY_S = 30.0
"""When stderr is not a terminal (a CI log, ``| tee``), a progress line at least this often."""


class RunProgress:
    """Episodes done, the pass rate over scored episodes, and a count of every non-ok status.

    A ``RunObserver``: ``started(total, existing)`` once (a resumed run's earlier episodes
    count), ``finished(record)`` per episode. Use it as a context manager around the run: the
    bar appears when the episodes start (not while an environment loads) and goes at the end;
    with ``enabled=False`` it only counts. When stderr is not a terminal, a bar cannot redraw:
    one line is written when the episodes start and then at least every ``LOG_EVERY_S``
    seconds (a line per finished episode at most that often, and a heartbeat between).
    """

    def __init__(
        self,
        *,
        description: str = "episodes",
        pass_threshold: float | None = 1.0,
        enabled: bool = True,
        console: Console | None = None,
    ) -> None:
        """``pass_threshold=None`` shows no pass rate (vet's probes are meant to fail)."""
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
            console=console or err(),
            disable=not enabled,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task(description, total=None, stats="")
        self._live = False
        self.description = description
        self.console = console or err()
        self.log_lines = enabled and not self.console.is_terminal
        self.clock: Callable[[], float] = time.monotonic
        self._t0 = self._last_line = 0.0
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # --- RunObserver --------------------------------------------------------------------------
    def started(self, total: int, existing: list[EpisodeRecord]) -> None:
        for rec in existing:
            self._count(rec)
        self._progress.update(self._task, total=total, completed=len(existing))
        self._show()
        self._begin()

    def finished(self, record: EpisodeRecord) -> None:
        self._count(record)
        self._progress.advance(self._task)
        self._show()
        self.log(force=False)

    def log(self, *, force: bool) -> None:
        """The progress line (``episodes 12/40 pass 25.0% timeout=1, 31s``) when stderr is not
        a terminal: now with ``force``, else only when ``LOG_EVERY_S`` passed since the last."""
        now = self.clock()
        if not self.log_lines or (not force and now - self._last_line < LOG_EVERY_S):
            return
        self._last_line = now
        task = next(t for t in self._progress.tasks if t.id == self._task)
        done = f"{int(task.completed)}/{int(task.total)}" if task.total else f"{task.completed:g}"
        stats = f" {self.stats()}" if self.stats() else ""
        self.console.print(
            f"{self.description} {done}{stats}, {now - self._t0:.0f}s", soft_wrap=True
        )

    def _beat(self) -> None:
        while not self._stop.wait(LOG_EVERY_S):
            self.log(force=False)

    def add(self, n: int) -> None:
        """``n`` more episodes to run (a plan made in batches)."""
        task = next(t for t in self._progress.tasks if t.id == self._task)
        total = task.total or 0
        self._progress.update(self._task, total=total + n)
        self._begin()

    def trajectory(self, planned: PlannedEpisode, traj: Trajectory) -> None:
        """``run_episodes(..., on_trajectory=progress.trajectory)``."""
        self.finished(traj.record())

    # --- drawing ------------------------------------------------------------------------------
    def _count(self, rec: EpisodeRecord) -> None:
        self.counts[rec.status] += 1
        if rec.scored and self.pass_threshold is not None:
            self.scored += 1
            self.passed += is_pass(rec.reward, self.pass_threshold)

    def stats(self) -> str:
        """``pass 42.0% timeout=3 infra_error=1``: what the bar shows beside the count."""
        rate = ""
        if self.pass_threshold is not None:
            rate = f"pass {self.passed / self.scored:.1%}" if self.scored else "pass -"
        errs = " ".join(
            f"{s.value}={self.counts[s.value]}"
            for s in Status
            if s is not Status.OK and self.counts[s.value]
        )
        return f"{rate} {errs}".strip()

    def _show(self) -> None:
        if self.enabled:
            self._progress.update(self._task, stats=self.stats())

    def _begin(self) -> None:
        if not self._live:
            self._live = True
            self._progress.start()
            if self.log_lines:
                self._t0 = self.clock()
                self.log(force=True)
                self._heartbeat = threading.Thread(target=self._beat, daemon=True)
                self._heartbeat.start()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._live:
            self.log(force=True)
            self._progress.stop()


class VetProgress:
    """A ``VetObserver`` (``envlab.vet``): vet plans its episodes in batches."""

    def __init__(self, progress: RunProgress) -> None:
        self.progress = progress

    def planned(self, n: int) -> None:
        self.progress.add(n)

    def finished(self, episode: PlannedEpisode, trajectory: Trajectory) -> None:
        self.progress.finished(trajectory.record())


class CatalogProgress:
    """``arena --catalog``: environments vetted of those found, with the verdicts so far. When
    stderr is not a terminal, one line per environment instead of a bar."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None) -> None:
        self.console = console or err()
        self.enabled = enabled
        self.verdicts: Counter[str] = Counter()
        self.tty = self.console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]arena"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not (enabled and self.tty),
            refresh_per_second=2,
        )
        self._task = self._progress.add_task("arena", total=None, stats="")
        self.n = 0

    def start(self, total: int) -> None:
        self._progress.update(self._task, total=total)

    def done(self, entry: object) -> None:
        self.n += 1
        for k, v in getattr(entry, "verdict_counts", {}).items():
            self.verdicts[k] += v
        stats = " ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items()) if v)
        self._progress.update(self._task, advance=1, stats=stats)
        if self.enabled and not self.tty:
            name, status = getattr(entry, "name", "?"), getattr(entry, "status", "?")
            self.console.print(f"arena {self.n}: {name} {status} ({stats})")

    def __enter__(self) -> CatalogProgress:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()
