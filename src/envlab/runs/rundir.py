"""A run directory opened for reading: its ``run.json``, then its episodes as a stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from envlab.core import EpisodeRecord, NotFoundError, StoreError, Trajectory
from envlab.runs.info import RUN_FILE, TRAJECTORIES_FILE, RunInfo, load_run_info
from envlab.runs.store import TrajectoryStore


class RunDir:
    """What ``envlab eval --out DIR`` wrote: ``info`` (``run.json``) and the episodes, read from
    ``trajectories.jsonl`` one line at a time, never held all at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise NotFoundError(
                f"no run directory at {self.path}: pass a directory written by "
                "`envlab eval --out DIR`"
            )
        if not (self.path / RUN_FILE).exists():
            raise StoreError(
                f"{self.path} is not a run directory: it has no {RUN_FILE}. "
                "Pass a directory written by `envlab eval --out DIR`."
            )
        self.info: RunInfo = load_run_info(self.path)
        self.store = TrajectoryStore(self.path / TRAJECTORIES_FILE)

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    def trajectories(self, *, every_record: bool = False) -> Iterator[Trajectory]:
        """The whole trajectories, one per episode (the last record of each), as a stream."""
        return self.store.iter(every_record=every_record)

    def records(self) -> list[EpisodeRecord]:
        """The light record of every episode; ``StoreError`` when there is none yet."""
        records = list(self.store.records())
        if not records:
            raise StoreError(
                f"{self.path} holds no episodes yet ({TRAJECTORIES_FILE} is missing or empty). "
                f"Finish it with `envlab eval ... --out {self.path} --resume`."
            )
        return records

    @property
    def notes(self) -> list[str]:
        """What reading found and worked around (a torn last line: a crash mid-write)."""
        if self.store.dropped_torn_line is None:
            return []
        return [f"{self.path}: ignored a torn last line of {TRAJECTORIES_FILE}"]
