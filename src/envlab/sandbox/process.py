"""Run one child process on the event loop: capped output, a wall-clock timeout, a tree kill.

No threads and no asyncio child watcher: the child is started with ``subprocess.Popen`` (fast
``vfork`` path, its own process group), its pipes and a pidfd are watched with ``add_reader``.
Output beyond the cap is drained and counted, never kept: a command that prints a gigabyte
costs the cap in memory, not a gigabyte.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

OnStatus = Callable[[bytes], Awaitable[None] | None]
"""What sees the first line of a child's status pipe (sandbox/gate.py's ``StartGate``)."""
_CHUNK = 1 << 20
_DRAIN_AFTER_KILL_S = 5.0


def truncation_marker(omitted: int) -> bytes:
    return f"\n[... envlab: {omitted} bytes of output omitted ...]\n".encode()


class CappedBuffer:
    """Keeps the first ``limit - limit // 4`` bytes and the last ``limit // 4`` bytes."""

    __slots__ = ("_head", "_head_max", "_tail", "_tail_max", "total")

    def __init__(self, limit: int) -> None:
        self._tail_max = limit // 4
        self._head_max = limit - self._tail_max
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_max - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_max:
            self._tail += data
            if len(self._tail) > 2 * self._tail_max:
                del self._tail[: len(self._tail) - self._tail_max]

    @property
    def truncated(self) -> bool:
        return self.total > self._head_max + self._tail_max

    def getvalue(self) -> bytes:
        tail = bytes(self._tail[-self._tail_max :]) if self._tail_max else b""
        if not self.truncated:
            return bytes(self._head) + bytes(self._tail)
        omitted = self.total - len(self._head) - len(tail)
        return bytes(self._head) + truncation_marker(omitted) + tail


@dataclass(slots=True)
class RawResult:
    stdout: bytes
    stderr: bytes
    returncode: int
    """Exit status; a child killed by signal N reads ``128 + N``, as in a shell."""
    timed_out: bool
    truncated: bool
    duration_s: float
    status: bytes = b""
    """What the child wrote on ``status_fd``, when one was given."""


class _Child:
    """One running child and the loop callbacks that feed its buffers."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        output_limit: int,
        stdin: bytes | None,
        status_fd: int | None = None,
        on_status: OnStatus | None = None,
    ) -> None:
        self.proc = proc
        self.loop = asyncio.get_running_loop()
        self.buffers: dict[int, CappedBuffer] = {}
        self.out = CappedBuffer(output_limit)
        self.err = CappedBuffer(output_limit)
        self.open_fds: set[int] = set()
        self.done = self.loop.create_future()
        self.exit_status: int | None = None
        self._pidfd: int | None = None
        self._stdin = memoryview(stdin) if stdin else None
        self.status = bytearray()
        self._on_status = on_status
        self.gate_error: BaseException | None = None
        self.gate_task: asyncio.Future[None] | None = None
        if status_fd is not None:
            os.set_blocking(status_fd, False)
            self.open_fds.add(status_fd)
            self.loop.add_reader(status_fd, self._on_status_readable, status_fd)
        for stream, buffer in ((proc.stdout, self.out), (proc.stderr, self.err)):
            assert stream is not None
            fd = stream.fileno()
            os.set_blocking(fd, False)
            self.buffers[fd] = buffer
            self.open_fds.add(fd)
            self.loop.add_reader(fd, self._on_readable, fd)
        if proc.stdin is not None:
            fd = proc.stdin.fileno()
            os.set_blocking(fd, False)
            if self._stdin is None:
                proc.stdin.close()
            else:
                self.loop.add_writer(fd, self._on_writable, fd)
        try:
            self._pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): poll
            self.loop.create_task(self._poll_exit())
        else:
            self.loop.add_reader(self._pidfd, self._on_exit)

    # --- callbacks ---------------------------------------------------------------------------
    def _on_readable(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.buffers[fd].feed(data)
            return
        self.loop.remove_reader(fd)
        self.open_fds.discard(fd)
        self._maybe_done()

    def _on_status_readable(self, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.status += data
            if self._on_status is not None and b"\n" in self.status:
                gate, self._on_status = self._on_status, None
                try:
                    pending = gate(bytes(self.status.split(b"\n", 1)[0]))
                except BaseException as e:  # the command must not start unlimited
                    self.gate_error = e
                    self.kill()
                else:
                    if pending is not None:
                        self.gate_task = asyncio.ensure_future(pending, loop=self.loop)
                        self.gate_task.add_done_callback(self._gate_done)
            return
        self.loop.remove_reader(fd)
        self.open_fds.discard(fd)
        os.close(fd)
        self._maybe_done()

    def _gate_done(self, task: asyncio.Future[None]) -> None:
        if task.cancelled() or task.exception() is not None:  # never start it half-set
            if self.gate_error is None and not task.cancelled():
                self.gate_error = task.exception()
            self.kill()

    def _on_writable(self, fd: int) -> None:
        assert self._stdin is not None and self.proc.stdin is not None
        try:
            n = os.write(fd, self._stdin[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the child closed its stdin: the rest is not wanted
            n = len(self._stdin)
        self._stdin = self._stdin[n:]
        if not self._stdin:
            self.loop.remove_writer(fd)
            self.proc.stdin.close()

    def _on_exit(self) -> None:
        assert self._pidfd is not None
        self._reap()
        if self.exit_status is not None:
            self.loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
            self._maybe_done()

    async def _poll_exit(self) -> None:
        while self.exit_status is None:
            await asyncio.sleep(0.005)
            self._reap()
        self._maybe_done()

    def _reap(self) -> None:
        if self.exit_status is not None:
            return
        try:
            pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: we cannot know how it ended
            self.exit_status = 255
            return
        if pid:
            self.exit_status = os.waitstatus_to_exitcode(status)
            self.proc.returncode = self.exit_status

    def _maybe_done(self) -> None:
        if self.exit_status is not None and not self.open_fds and not self.done.done():
            self.done.set_result(None)

    # --- control -----------------------------------------------------------------------------
    def kill(self) -> None:
        if self.exit_status is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def cleanup(self) -> None:
        if self.gate_task is not None and not self.gate_task.done():
            self.gate_task.cancel()  # the command ended before its gate opened
        pipes = {s.fileno() for s in (self.proc.stdout, self.proc.stderr) if s and not s.closed}
        for fd in list(self.open_fds):
            self.loop.remove_reader(fd)
            if fd not in pipes:
                os.close(fd)
        self.open_fds.clear()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.loop.remove_writer(self.proc.stdin.fileno())
            self.proc.stdin.close()
        if self._pidfd is not None:
            self.loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        if self.exit_status is None:  # last resort: never leave a zombie behind
            self.kill()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.proc.pid, 0)


async def run_process(
    argv: Sequence[str],
    *,
    timeout: float | None,
    output_limit: int,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
    status_fd: int | None = None,
    on_status: OnStatus | None = None,
    running: set[int] | None = None,
) -> RawResult:
    """Run ``argv`` in its own process group; kill the group at ``timeout`` or on cancellation.

    ``pass_fds`` are handed to the child under their own numbers, then closed here.
    ``status_fd`` is the read end of a pipe the child reports on (bwrap's ``--json-status-fd``):
    everything read is returned in ``status``, and ``on_status`` is called with its first line
    as soon as it arrives; if ``on_status`` raises, the child is killed and the error re-raised.
    ``on_status`` may return an awaitable (what it waits for before the child may go on): it is
    run as a task, and the same holds if it raises.
    ``running`` holds the pids of children still running, for a caller that must kill them all.
    """
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            process_group=0,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        if status_fd is not None:
            os.close(status_fd)
        raise
    finally:
        for fd in pass_fds:
            os.close(fd)
    if running is not None:
        running.add(proc.pid)
    child = _Child(proc, output_limit, stdin, status_fd, on_status)
    timed_out = False
    try:
        try:
            await asyncio.wait_for(asyncio.shield(child.done), timeout)
        except TimeoutError:
            timed_out = True
            child.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(child.done), _DRAIN_AFTER_KILL_S)
    except asyncio.CancelledError:
        child.kill()
        raise
    finally:
        child.cleanup()
        if running is not None:
            running.discard(proc.pid)
    if child.gate_error is not None:
        raise child.gate_error
    out, err = child.out, child.err
    code = child.exit_status if child.exit_status is not None else -signal.SIGKILL
    return RawResult(
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        returncode=128 - code if code < 0 else code,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        duration_s=time.perf_counter() - t0,
        status=bytes(child.status),
    )
