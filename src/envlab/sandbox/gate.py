"""What happens around the start of one ``bwrap``: its seccomp program on a pipe, and the gate
that sets the command's limits and attaches its network while bwrap's PID 1 waits on
``--block-fd``."""

from __future__ import annotations

import contextlib
import json
import os
import resource
from collections.abc import Awaitable

from envlab.sandbox.limits import Cgroup
from envlab.sandbox.network import Pasta
from envlab.sandbox.seccomp import host_program


class StartGate:
    """What runs while bwrap's PID 1 waits on ``--block-fd``, before it starts the command: set
    the rlimits on it (the command inherits them), move it into the cgroup and, for a public
    sandbox, attach the network stack to its network namespace (sandbox/network.py). No program
    of the sandbox runs for this; if it fails the command never starts (the caller kills it).

    ``close()``, once the command (or the sandbox that holds the namespace) has ended, stops the
    network stack: every sandbox calls it, whatever happened."""

    def __init__(
        self,
        release_fd: int,
        limits: list[tuple[int, int]],
        cgroup: Cgroup | None,
        network: Pasta | None = None,
    ) -> None:
        self.release_fd: int | None = release_fd
        self.limits = limits
        self.cgroup = cgroup
        self.network = network

    def __call__(self, first_status_line: bytes) -> Awaitable[None] | None:
        """On the event loop (``run_process``'s ``on_status``): the command is released now, or,
        with a network stack to attach, by the awaitable returned, once the stack is ready. On a
        failure the command stays blocked (the caller kills it, then calls ``close``)."""
        if self._prepare(first_status_line) and self.network is not None:
            return self._release_when_ready(self.network)
        self._release()
        return None

    def blocking(self, first_status_line: bytes) -> None:
        """The same, for a caller off the event loop: waits for the network stack itself."""
        if self._prepare(first_status_line) and self.network is not None:
            self.network.wait_ready()
        self._release()

    def _prepare(self, first_status_line: bytes) -> bool:
        """Limits, cgroup, network stack started; ``False`` when bwrap died first."""
        pid = int(json.loads(first_status_line)["child-pid"])
        try:
            for which, value in self.limits:
                resource.prlimit(pid, which, (value, value))
            if self.cgroup is not None:
                self.cgroup.attach(pid)
            if self.network is not None:
                self.network.start(pid)
        except ProcessLookupError:
            return False  # bwrap died before the command could start: its exit says why
        return True

    async def _release_when_ready(self, network: Pasta) -> None:
        await network.ready()
        self._release()

    def _release(self) -> None:
        """Let the command start (closing the pipe unwritten would too: only ever after the
        command is dead, in ``close``)."""
        if self.release_fd is not None:
            with contextlib.suppress(BrokenPipeError):  # bwrap died: its exit says why
                os.write(self.release_fd, b"x")
        self._close_release()

    def _close_release(self) -> None:
        if self.release_fd is not None:
            os.close(self.release_fd)
            self.release_fd = None

    def close(self) -> None:
        """The command has ended (or never started): stop the network stack."""
        self._close_release()
        if self.network is not None:
            self.network.stop()


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
