"""What happens around the start of one ``bwrap``: its seccomp program on a pipe, and the gate
that sets the command's limits while bwrap's PID 1 waits on ``--block-fd``."""

from __future__ import annotations

import json
import os
import resource

from envlab.sandbox.limits import Cgroup
from envlab.sandbox.seccomp import host_program


class StartGate:
    """What runs while bwrap's PID 1 waits on ``--block-fd``, before it starts the command: set
    the rlimits on it (the command inherits them) and move it into the cgroup. No program runs
    for this; if it fails the command never starts (the caller kills it)."""

    def __init__(
        self, release_fd: int, limits: list[tuple[int, int]], cgroup: Cgroup | None
    ) -> None:
        self.release_fd: int | None = release_fd
        self.limits = limits
        self.cgroup = cgroup

    def __call__(self, first_status_line: bytes) -> None:
        try:
            pid = int(json.loads(first_status_line)["child-pid"])
            for which, value in self.limits:
                resource.prlimit(pid, which, (value, value))
            if self.cgroup is not None:
                self.cgroup.attach(pid)
            assert self.release_fd is not None
            os.write(self.release_fd, b"x")
        except (ProcessLookupError, BrokenPipeError):
            pass  # bwrap died before the command could start: its exit says why
        finally:
            self.close()

    def close(self) -> None:
        if self.release_fd is not None:
            os.close(self.release_fd)
            self.release_fd = None


def pidns(status: bytes) -> int | None:
    """The PID namespace bwrap reported on its status fd (its first JSON line)."""
    try:
        return int(json.loads(status.split(b"\n", 1)[0])["pid-namespace"])
    except (ValueError, KeyError, TypeError):
        return None


def seccomp_fd() -> int:
    """The read end of a pipe holding the seccomp program (one per bwrap: a shared file offset
    would be raced by concurrent bwraps). The program is far smaller than a pipe's buffer."""
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        os.write(w, host_program())
    finally:
        os.close(w)
    return r
