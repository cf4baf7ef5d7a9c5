"""One host uid per live sandbox, so that process limits and kills are per sandbox.

A uid is leased by holding an ``flock`` on ``<lock root>/uids/<uid>.lock`` (``/run/envlab`` for
root; never below ``ENVLAB_SANDBOX_DIR``, so two envlab processes with different state
directories never share a uid): exclusive across every envlab process on the host, released by
the kernel if the holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import time

from envlab.core.errors import InfraError
from envlab.sandbox.owner import lock_root

UID_BASE = int(os.environ.get("ENVLAB_SANDBOX_UID_BASE", "1900000000"))
"""Far from the uids of people and of rootless containers (subuid ranges start at 100000)."""
UID_SLOTS = int(os.environ.get("ENVLAB_SANDBOX_UID_SLOTS", "4096"))
"""Sandboxes alive at once on one host; every one of these uids is named in the staged passwd."""


class UidLease:
    """A uid this sandbox owns until ``release()``."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def try_lease(uid: int) -> UidLease | None:
    """The lease of ``uid`` if no one holds it, else None."""
    path = lock_root() / "uids" / f"{uid}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return UidLease(uid, fd)


def lease_uid() -> UidLease:
    """A sandbox uid no other sandbox on this host holds."""
    start = random.randrange(UID_SLOTS)
    for i in range(UID_SLOTS):
        lease = try_lease(UID_BASE + (start + i) % UID_SLOTS)
        if lease is not None:
            return lease
    raise InfraError(f"all {UID_SLOTS} sandbox uids are in use; close some sandboxes")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def processes_of(uid: int, pidns: int | None = None) -> list[int]:
    """Host pids of the live (not zombie) processes whose effective uid is ``uid`` (and whose
    PID namespace is ``pidns``, when given)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if (
                    os.stat(f"/proc/{name}").st_uid == uid
                    and _alive(int(name))
                    and (pidns is None or os.stat(f"/proc/{name}/ns/pid").st_ino == pidns)
                ):
                    pids.append(int(name))
    return pids


def kill_uid(uid: int, *, pidns: int | None = None, deadline_s: float = 5.0) -> int:
    """SIGKILL every process of ``uid`` (in PID namespace ``pidns``, when given) until none is
    left; return how many were killed. Only ever called with a uid this process leased, so
    nothing else can be hit.
    """
    killed: set[int] = set()
    end = time.monotonic() + deadline_s
    while True:
        pids = processes_of(uid, pidns)
        if not pids:
            return len(killed)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if time.monotonic() > end:
            raise InfraError(f"processes of sandbox uid {uid} survived SIGKILL for {deadline_s}s")
        time.sleep(0.002)
