"""``trajectories.jsonl``: append-only, flushed per episode, resumable after a crash."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import ValidationError

from envlab.core import StoreError, Trajectory

log = logging.getLogger("envlab.store")


class TrajectoryStore:
    """One ``Trajectory`` per line. A torn last line is dropped with a warning; any other corrupt
    line is an error naming it, so nothing recorded is silently lost."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.dropped_torn_line: str | None = None

    def load(self, *, repair: bool = False, every_record: bool = False) -> list[Trajectory]:
        """The trajectories, one per episode: when an episode was recorded twice (an
        ``infra_error`` run again by ``--resume``) the last record wins. ``every_record`` keeps
        them all. With ``repair``, cut a torn last line off the file."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        out: list[Trajectory] = []
        offset = 0
        lines = data.split(b"\n")
        # data ending in "\n" gives a final empty chunk; anything else is an unterminated line
        for lineno, raw in enumerate(lines, start=1):
            is_last = lineno == len(lines) or (lineno == len(lines) - 1 and lines[-1] == b"")
            start = offset
            offset += len(raw) + 1
            if not raw.strip():
                continue
            try:
                out.append(Trajectory.from_json(raw))
            except (ValidationError, ValueError) as e:
                if is_last:
                    self.dropped_torn_line = raw[:120].decode("utf-8", "replace")
                    log.warning(
                        "%s:%d: dropping a torn last line (%d bytes), an episode interrupted "
                        "mid-write; it will be run again",
                        self.path,
                        lineno,
                        len(raw),
                    )
                    if repair:
                        with self.path.open("r+b") as f:
                            f.truncate(start)
                    break
                raise StoreError(
                    f"{self.path}:{lineno}: corrupt trajectory line ({_first_error(e)}). "
                    "Only the last line may be torn by a crash; restore or delete this line, "
                    "then run again with --resume."
                ) from None
        if every_record:
            return out
        latest = {t.episode_id: t for t in out}
        return list(latest.values())

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, traj: Trajectory) -> None:
        """Hand one whole line to the OS in one unbuffered ``write``: a crash of the process loses
        only the episodes in flight, and a line is torn only if the write itself is cut short."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        data = traj.to_json() + b"\n"
        written = os.write(self._fd, data)
        while written < len(data):  # short writes are rare (full disk, signals); finish the line
            written += os.write(self._fd, data[written:])

    def sync(self) -> None:
        """Force what was written to disk (survives a power loss, not only a crash)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TrajectoryStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        return (
            f"{err['type']} at {'.'.join(str(x) for x in err['loc']) or 'top level'}: {err['msg']}"
        )
    return str(e)[:200]
