"""The trajectory store of a run directory: append-only, one writer, resumable after a crash.

    trajectories.jsonl   one ``Trajectory`` per line, handed to the OS in one ``write``
    blobs/<sha256>       long strings of the messages (a task's instruction), written once per
                         run and referenced from the lines (:mod:`envlab.runs.blobs`)
    lock                 held (``flock``) by the one process writing the run; its pid inside

Reading streams the file line by line (``iter``, ``records``): a run of any size is read in the
memory of one trajectory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from envlab.core import EpisodeRecord, StoreError, Trajectory
from envlab.runs.blobs import BLOB_MIN_CHARS, BLOBS_DIR, REF_JSON, Blobs
from envlab.runs.errors import first_error, store_error
from envlab.runs.lock import RunLock

log = logging.getLogger("envlab.store")

_ID = re.compile(rb'\{"episode_id":("(?:[^"\\]|\\.)*")')
"""The start of every line this store writes (the first field of a ``Trajectory``)."""


class TrajectoryStore:
    """One ``Trajectory`` per line. A torn last line is dropped with a warning; any other corrupt
    line is an error naming it, so nothing recorded is silently lost.

    Writing (``open``/``append``, or reading with ``repair=True``) takes the run directory's
    lock, held until ``close()``: a second writer is refused with the holder's pid. Reading
    needs no lock.
    """

    def __init__(self, path: str | Path, *, blob_min_chars: int = BLOB_MIN_CHARS) -> None:
        self.path = Path(path)
        self.blobs = Blobs(self.path.parent / BLOBS_DIR, min_chars=blob_min_chars)
        self._lock = RunLock(self.path.parent)
        self._fd: int | None = None
        self.dropped_torn_line: str | None = None
        self.repaired_newline = False

    @property
    def blobs_dir(self) -> Path:
        return self.blobs.path

    def lock(self) -> None:
        """Become the run's one writer (idempotent); ``StoreError`` naming the holder if not."""
        self._lock.acquire()

    # reading

    def load(self, *, repair: bool = False, every_record: bool = False) -> list[Trajectory]:
        """``list(self.iter(...))``: every trajectory in memory at once."""
        return list(self.iter(repair=repair, every_record=every_record))

    def iter(
        self, *, repair: bool = False, every_record: bool = False, messages: bool = True
    ) -> Iterator[Trajectory]:
        """The trajectories, one per episode, read one line at a time.

        When an episode was recorded twice (an ``infra_error`` run again by ``--resume``) the
        last record wins, in the place of that record; ``every_record`` yields them all. With
        ``repair`` (which takes the lock now), cut a torn last line off the file, and end a
        whole last record that lacks its newline with one. Without ``messages`` the long
        strings stored as blobs are left as references (nothing in ``blobs/`` is read)."""
        if repair:
            self.lock()
        if not self.path.exists():
            return iter(())
        size = self.path.stat().st_size  # lines a writer appends meanwhile are not read
        keep = None if every_record else self._latest(size)
        return self._read(size, keep, repair=repair, messages=messages)

    def records(self) -> Iterator[EpisodeRecord]:
        """The light record of each episode (what summaries need), without reading blobs."""
        return (t.record() for t in self.iter(messages=False))

    def _lines(self, size: int) -> Iterator[tuple[int, int, bytes, bool]]:
        """``(line number, offset, line without its newline, is the last line)`` of the file's
        first ``size`` bytes."""
        with self.path.open("rb") as f:
            offset, lineno = 0, 0
            while offset < size:
                chunk = f.readline(size - offset)
                if not chunk:
                    return
                lineno += 1
                start, offset = offset, offset + len(chunk)
                yield lineno, start, chunk.removesuffix(b"\n"), offset >= size

    def _latest(self, size: int) -> set[int]:
        """The line numbers to read: the last record of each episode, and every line whose
        episode id cannot be told cheaply (read in full, to report it if corrupt)."""
        last: dict[str, int] = {}
        unknown: set[int] = set()
        for lineno, _, raw, final in self._lines(size):
            if not raw.strip():
                continue
            episode_id = _whole_line_id(raw) if final else _line_id(raw)
            if episode_id is None:
                unknown.add(lineno)
            else:
                last[episode_id] = lineno
        return unknown.union(last.values())

    def _read(
        self, size: int, keep: set[int] | None, *, repair: bool, messages: bool
    ) -> Iterator[Trajectory]:
        cache: dict[str, str] = {}
        for lineno, start, raw, final in self._lines(size):
            if not raw.strip() or (keep is not None and lineno not in keep):
                continue
            try:
                traj = Trajectory.from_json(raw)
            except (ValidationError, ValueError) as e:
                if final:
                    self._drop_torn(raw, lineno, start, repair)
                    return
                raise StoreError(
                    f"{self.path}:{lineno}: corrupt trajectory line ({first_error(e)}). "
                    "Only the last line may be torn by a crash; restore or delete this line, "
                    "then run again with --resume."
                ) from None
            if messages and REF_JSON in raw:
                traj.messages = self.blobs.inflate(traj.messages, cache, f"{self.path}:{lineno}")
            if final and repair and start + len(raw) == size:  # a whole record, no newline
                self._end_line()
            yield traj

    def _drop_torn(self, raw: bytes, lineno: int, start: int, repair: bool) -> None:
        self.dropped_torn_line = raw[:120].decode("utf-8", "replace")
        log.warning(
            "%s:%d: dropping a torn last line (%d bytes), an episode interrupted mid-write; "
            "it will be run again",
            self.path,
            lineno,
            len(raw),
        )
        if repair:
            with self.path.open("r+b") as f:
                f.truncate(start)

    def _end_line(self) -> None:
        self.repaired_newline = True
        log.warning("%s: the last record had no newline; added one", self.path)
        try:
            with self.path.open("ab") as f:
                f.write(b"\n")
        except OSError as e:
            raise store_error(e, self.path, "repair") from e

    # writing

    def open(self) -> None:
        if self._fd is not None:
            return
        self.lock()
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise store_error(e, self.path, "open") from e
        if not self._ends_with_newline():
            for _ in self.iter(repair=True, every_record=True, messages=False):
                pass  # never glue a record to one without its newline
        self.blobs.remove_stale()

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return True
            f.seek(size - 1)
            return f.read(1) == b"\n"

    def append(self, traj: Trajectory) -> None:
        """Write the blobs of ``traj``, then hand its line to the OS in one unbuffered
        ``write``: a crash loses only the episodes in flight. If the disk is full, the partial
        line is cut off and ``StoreError`` says so; every line before it is intact."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        data = self._encode(traj) + b"\n"
        written = 0
        try:
            while written < len(data):  # one write, but for a full disk or a signal
                written += os.write(self._fd, data[written:])
        except OSError as e:
            self._cut_back(written)
            raise store_error(e, self.path, "append a trajectory to") from e

    def _cut_back(self, written: int) -> None:
        """Cut off the ``written`` bytes of a partial line (the lock makes this process the
        only writer: they are the file's last)."""
        try:
            assert self._fd is not None
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
        except OSError:
            log.warning("%s: could not cut a partial line off; --resume will drop it", self.path)

    def _encode(self, traj: Trajectory) -> bytes:
        data = traj.to_json()
        # a line shorter than a blob holds no string that long, nor one that looks like a
        # reference: nothing to store apart (the common case, without walking the messages)
        if len(data) < self.blobs.min_chars and REF_JSON not in data:
            return data
        messages = [self.blobs.externalize(m) for m in traj.messages]
        if any(a is not b for a, b in zip(messages, traj.messages, strict=True)):
            traj = dataclasses.replace(traj, messages=messages)
        return traj.to_json()

    def sync(self) -> None:
        """Force what was written to disk (survives a power loss, not only a crash)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise store_error(e, self.path, "sync") from e

    def close(self) -> None:
        """Sync and close the file, and release the run's lock."""
        try:
            if self._fd is not None:
                try:
                    self.sync()
                finally:
                    os.close(self._fd)
                    self._fd = None
        finally:
            self._lock.release()

    def __enter__(self) -> TrajectoryStore:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line_id(raw: bytes) -> str | None:
    """The episode id of a line, from its start when it is one this store wrote."""
    m = _ID.match(raw)
    if m is None:
        return _whole_line_id(raw)
    try:
        value = json.loads(m.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _whole_line_id(raw: bytes) -> str | None:
    """The episode id of a line that parses as a whole trajectory (a torn one has none)."""
    try:
        return Trajectory.from_json(raw).episode_id
    except (ValidationError, ValueError):
        return None
