"""The trajectory store of a run directory: append-only, one writer, resumable after a crash.

    trajectories.jsonl   one ``Trajectory`` per line, handed to the OS in one ``write``
    blobs/<sha256>       long strings of the messages (a task's instruction), written once per
                         run and referenced from the lines; ``load()`` puts them back
    lock                 held (``flock``) by the one process writing the run; its pid inside

A reference is a string ``"\\x00envlab-blob:sha256:<hex>"``. Every string of a message that is
long, or that starts like a reference, is stored as a blob: a reference in a line is never text
the agent wrote, and ``load()`` returns exactly the messages that were recorded.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envlab.core import StoreError, Trajectory

log = logging.getLogger("envlab.store")

LOCK_FILE = "lock"
BLOBS_DIR = "blobs"
BLOB_MIN_CHARS = 16 * 1024
"""Strings of messages this long (or longer) are stored once, as blobs."""
_REF = "\x00envlab-blob:sha256:"
_REF_JSON = b"\\u0000envlab-blob:sha256:"  # how a reference looks inside a JSON line


class RunLock:
    """An exclusive ``flock`` on ``<run dir>/lock`` held while one process writes the run.

    The kernel drops it when the holder exits, however it exits, so it never goes stale. The
    file is never removed (a process that unlinked it would let two others lock two files)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise _os_error(e, self.path, "create the lock file of") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(
                    f"{self.path.parent} is being written by another process (pid {holder}, "
                    f"holding {self.path}). Two writers would record episodes twice: wait for "
                    "it to finish (or stop it), then run again with --resume."
                ) from None
            raise _os_error(e, self.path, "lock") from e
        try:  # who holds it, for the message of the next one; only informative
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class TrajectoryStore:
    """One ``Trajectory`` per line. A torn last line is dropped with a warning; any other corrupt
    line is an error naming it, so nothing recorded is silently lost.

    Writing (``open``/``append``, or ``load(repair=True)``) takes the run directory's lock, held
    until ``close()``: a second writer is refused with the holder's pid. Reading needs no lock.
    """

    def __init__(self, path: str | Path, *, blob_min_chars: int = BLOB_MIN_CHARS) -> None:
        self.path = Path(path)
        self.blobs_dir = self.path.parent / BLOBS_DIR
        self.blob_min_chars = blob_min_chars
        self._lock = RunLock(self.path.parent)
        self._fd: int | None = None
        self._blobs_known: set[str] = set()
        self.dropped_torn_line: str | None = None
        self.repaired_newline = False

    def lock(self) -> None:
        """Become the run's one writer (idempotent); ``StoreError`` naming the holder if not."""
        self._lock.acquire()

    def load(self, *, repair: bool = False, every_record: bool = False) -> list[Trajectory]:
        """The trajectories, one per episode: when an episode was recorded twice (an
        ``infra_error`` run again by ``--resume``) the last record wins. ``every_record`` keeps
        them all. With ``repair`` (which takes the lock), cut a torn last line off the file, and
        end a whole last record that lacks its newline with one."""
        if repair:
            self.lock()
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        out: list[Trajectory] = []
        blobs: dict[str, str] = {}
        offset = 0
        lines = data.split(b"\n")
        last = len(lines) - (2 if lines[-1] == b"" else 1)  # index of the last non-empty chunk
        for i, raw in enumerate(lines):
            start, offset = offset, offset + len(raw) + 1
            if not raw.strip():
                continue
            try:
                traj = Trajectory.from_json(raw)
            except (ValidationError, ValueError) as e:
                if i >= last:
                    self._drop_torn(raw, i + 1, start, repair)
                    break
                raise StoreError(
                    f"{self.path}:{i + 1}: corrupt trajectory line ({_first_error(e)}). "
                    "Only the last line may be torn by a crash; restore or delete this line, "
                    "then run again with --resume."
                ) from None
            if _REF_JSON in raw:
                traj.messages = self._inflate(traj.messages, blobs, i + 1)
            out.append(traj)
            if i == len(lines) - 1 and repair:  # a whole record, only its newline missing
                self._end_line()
        if every_record:
            return out
        latest = {t.episode_id: t for t in out}
        return list(latest.values())

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
            raise _os_error(e, self.path, "repair") from e

    def open(self) -> None:
        if self._fd is not None:
            return
        self.lock()
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise _os_error(e, self.path, "open") from e
        if not self._ends_with_newline():
            self.load(repair=True)  # never glue a record to one without its newline
        for stale in self.blobs_dir.glob(".*.tmp"):  # a blob whose writer was killed
            stale.unlink(missing_ok=True)

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
        start = os.fstat(self._fd).st_size  # the lock makes this process the only writer
        try:
            written = os.write(self._fd, data)
            while written < len(data):  # short writes are rare (full disk, signals)
                written += os.write(self._fd, data[written:])
        except OSError as e:
            self._cut(start)
            raise _os_error(e, self.path, "append a trajectory to") from e

    def _cut(self, size: int) -> None:
        try:
            assert self._fd is not None
            os.ftruncate(self._fd, size)
        except OSError:
            log.warning("%s: could not cut a partial line off; --resume will drop it", self.path)

    def _encode(self, traj: Trajectory) -> bytes:
        messages = [self._externalize(m) for m in traj.messages]
        if any(a is not b for a, b in zip(messages, traj.messages, strict=True)):
            traj = dataclasses.replace(traj, messages=messages)
        return traj.to_json()

    def _externalize(self, value: Any) -> Any:
        """``value`` with its long strings replaced by references to blobs (``value`` itself
        when nothing changed)."""
        if isinstance(value, str):
            if len(value) >= self.blob_min_chars or value.startswith(_REF):
                return _REF + self._put_blob(value.encode("utf-8", "surrogatepass"))
            return value
        if isinstance(value, dict):
            new = {k: self._externalize(v) for k, v in value.items()}
            return new if any(new[k] is not value[k] for k in value) else value
        if isinstance(value, list | tuple):
            items = [self._externalize(v) for v in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        return value

    def _put_blob(self, data: bytes) -> str:
        """Write ``blobs/<sha256>`` once (atomically: a temporary file, synced, renamed)."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.blobs_dir / digest
        if digest in self._blobs_known or final.is_file():
            self._blobs_known.add(digest)
            return digest
        tmp = self.blobs_dir / f".{digest}.{os.getpid()}.tmp"
        try:
            self.blobs_dir.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise _os_error(e, final, "write a message blob") from e
        self._blobs_known.add(digest)
        return digest

    def _inflate(self, value: Any, blobs: dict[str, str], lineno: int) -> Any:
        if isinstance(value, str):
            if not value.startswith(_REF):
                return value
            digest = value[len(_REF) :]
            if digest not in blobs:
                blobs[digest] = self._read_blob(digest, lineno)
            return blobs[digest]
        if isinstance(value, dict):
            return {k: self._inflate(v, blobs, lineno) for k, v in value.items()}
        if isinstance(value, list):
            return [self._inflate(v, blobs, lineno) for v in value]
        return value

    def _read_blob(self, digest: str, lineno: int) -> str:
        path = self.blobs_dir / digest
        where = f"{self.path}:{lineno}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"{where}: a message of this episode is stored in {path}, which is missing. "
                f"Copy a run directory whole (with its {BLOBS_DIR}/); or delete this line and "
                "run again with --resume to record the episode again."
            ) from None
        except OSError as e:
            raise _os_error(e, path, "read") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(
                f"{where}: {path} does not hold what was recorded (its sha256 differs): the "
                "file was changed or damaged. Restore it, or delete this line and run again "
                "with --resume."
            )
        return data.decode("utf-8", "surrogatepass")

    def sync(self) -> None:
        """Force what was written to disk (survives a power loss, not only a crash)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise _os_error(e, self.path, "sync") from e

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


def _os_error(e: OSError, path: Path, what: str) -> StoreError:
    """A ``StoreError`` that says what happened to ``path`` and what to do about it."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        kind = "the disk is full" if e.errno == errno.ENOSPC else "the disk quota is exhausted"
        return StoreError(
            f"cannot {what} {path}: {kind} (the filesystem of {path.parent}). Episodes recorded "
            "before are kept and a partial record is cut off: free some space, then run again "
            "with --resume."
        )
    if e.errno == errno.EFBIG:
        return StoreError(
            f"cannot {what} {path}: the file size limit was reached (ulimit -f, or the "
            "filesystem's largest file). Episodes recorded before are kept: raise the limit, "
            "then run again with --resume."
        )
    return StoreError(f"cannot {what} {path}: {e.strerror or e}")


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        return (
            f"{err['type']} at {'.'.join(str(x) for x in err['loc']) or 'top level'}: {err['msg']}"
        )
    return str(e)[:200]
