"""The one-writer lock of a run directory: an ``flock`` on ``<run dir>/lock``."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from envlab.core import StoreError
from envlab.runs.errors import store_error

LOCK_FILE = "lock"


class RunLock:
    """An exclusive ``flock`` on ``<run dir>/lock`` held while one process writes the run.

    The kernel drops it when the holder exits, however it exits, so it never goes stale. The
    file is never removed (a process that unlinked it would let two others lock two files)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
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
            raise store_error(e, self.path, "create the lock file of") from e
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
            raise store_error(e, self.path, "lock") from e
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
