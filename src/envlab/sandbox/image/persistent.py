"""``SharedImageSandbox``: an image sandbox whose namespaces live as long as it does.

Harbor's *shared* verifier mode (``[verifier] environment_mode = "shared"``): the tests run in
the agent's own environment, so a server the agent started is still there for them. One
``bwrap`` holds the namespaces (its command is the image's ``sleep infinity``); every command
enters them with ``nsenter`` (``docker exec``, in effect) and joins the sandbox's cgroup. The
first program it runs there is ``envlab-enter``, envlab's own, static and mounted read-only: it
installs the seccomp filter and drops every capability Docker does not leave a container
before anything of the image runs. A process a command leaves in the background lives on. A
public sandbox's network stack is attached once, to the holder's network namespace, and stopped
with the holder.
``/tests``, ``/logs/verifier`` and the offline kit are mounted from the start (the tests'
directory stays empty until grading; the logs are wiped before test.sh runs).

The integrity cost, which ``envlab vet`` reports: the agent's processes are alive while its work
is graded, so one of them may rewrite the reward after test.sh wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from importlib.resources import files
from pathlib import Path
from typing import Any

from envlab.core.errors import ConfigError
from envlab.sandbox.base import ExecRequest, Mount, SandboxError
from envlab.sandbox.gate import StartGate, seccomp_fd
from envlab.sandbox.image.runner import DOCKER_CAPS
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.process import CappedBuffer, RawResult
from envlab.sandbox.seccomp import host_program
from envlab.sandbox.workspace import state_dir

SHARED_DIRS = {"/tests": False, "/logs/verifier": True, "/opt/envlab/report": True,
               "/solution": False}  # fmt: skip
"""Mounted from the start (writable from inside or not); the host fills them when needed."""


ENTER_DIR = "/opt/envlab/enter"
PRIVATE_LOGS = "ENVLAB_PRIVATE_LOGS"
"""A command whose environment names this (Harbor's shared verifier, with ``VERIFIER_CGROUP``)
runs apart from the agent's live processes, which it still sees: a private mount namespace whose
``PRIVATE_LOGS`` is an empty tmpfs (``envlab-enter --isolate``), a cgroup of its own under the
sandbox's (``VERIFIER_CGROUP``: how its reporting process tells its stragglers from the agent's
processes), and ``CAP_WAKE_ALARM`` beside Docker's capabilities: a capability the agent's
processes lack, so the kernel refuses them ``/proc/PID/root``, ``mem``, ``fd`` and ``environ``
of the verifier's processes (``cap_ptrace_access_check``): they cannot reach its logs."""
VERIFIER_CGROUP = "ENVLAB_VERIFIER_CGROUP"
_CAP_WAKE_ALARM = 35
_CAP_BITS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4,
             "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8,
             "CAP_NET_BIND_SERVICE": 10, "CAP_NET_RAW": 13, "CAP_SYS_CHROOT": 18,
             "CAP_MKNOD": 27, "CAP_AUDIT_WRITE": 29, "CAP_SETFCAP": 31}  # fmt: skip


def _caps_mask() -> int:
    return sum(1 << _CAP_BITS[c] for c in DOCKER_CAPS)


def enter_binary() -> Path:
    """``envlab-enter`` (``c/enter.c``), compiled static once per content: what nsenter runs
    first in a shared sandbox, so that no program of the image ever runs with the host's
    capabilities (an agent could have replaced any of them)."""
    source = files("envlab.sandbox.image").joinpath("c/enter.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    out = state_dir() / f"enter-{digest}" / "envlab-enter"
    if out.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ConfigError(
            "Harbor's shared verifier mode needs a C compiler and a static libc (Debian: "
            "`apt-get install gcc libc6-dev`) to build envlab-enter once"
        )
    tmp = out.parent.with_name(f"{out.parent.name}.{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "enter.c").write_bytes(source)
    proc = subprocess.run([cc, "-static", "-O2", "-o", str(tmp / "envlab-enter"),
                           str(tmp / "enter.c")], capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise ConfigError(f"cannot build envlab-enter (static): {proc.stderr[-800:]}")
    (tmp / "enter.c").unlink()
    with contextlib.suppress(OSError):
        os.rename(tmp, out.parent)
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.close()


def _capped(f: Any, limit: int) -> tuple[bytes, bool]:
    """What a command wrote to ``f``, at most ``limit`` bytes (its head and tail)."""
    f.flush()
    size = f.seek(0, os.SEEK_END)
    buf = CappedBuffer(limit)
    f.seek(0)
    while chunk := f.read(1 << 20):
        buf.feed(chunk)
    return buf.getvalue(), size > limit


class SharedImageSandbox(ImageSandbox):
    """Build one with ``await SharedImageSandbox.create(image=..., ...)``; ``shared(path)`` is
    the host directory behind one of ``SHARED_DIRS``."""

    def __init__(self, **options: Any) -> None:
        extra = [*options.pop("mounts", ()), Mount(enter_binary().parent, ENTER_DIR)]
        super().__init__(mounts=extra, **options)
        # on the sandbox's bounded storage: what the agent writes there counts against it
        assert self.storage is not None
        self.shared_root = self.storage.fs / "shared"
        self._shared: dict[str, Path] = {}
        for i, target in enumerate(SHARED_DIRS):
            host = self.shared_root / str(i)
            host.mkdir(mode=0o755, parents=True)
            self._shared[target] = host
        self._mounts += [Mount(h, t, writable=SHARED_DIRS[t]) for t, h in self._shared.items()]
        self.add_lowers([])  # the command line again, with the shared directories mounted
        self._init: subprocess.Popen[bytes] | None = None
        self._holder_gate: StartGate | None = None  # its network stack lives as long as it does
        self._target: int | None = None
        nsenter = shutil.which("nsenter")
        if nsenter is None:
            raise SandboxError("the shared verifier mode needs nsenter (util-linux) on the host")
        self._nsenter = nsenter

    def shared(self, target: str) -> Path:
        return self._shared[target]

    def clear(self, target: str) -> None:
        """Empty one of the shared directories (from the host)."""
        host = self._shared[target]
        children = [str(c) for c in host.iterdir()]
        if children:  # rm, not shutil.rmtree: a tree deeper than Python's recursion limit
            subprocess.run(["rm", "-rf", "--", *children], check=False)

    def _start(self) -> None:
        """Start the holder of the namespaces (blocking)."""
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        passed = [status_w, block_r]
        if self.seccomp:
            passed.append(seccomp_fd())
        argv = [*self._prefix, "--json-status-fd", str(status_w), "--block-fd", str(block_r)]
        if self.seccomp:
            argv += ["--seccomp", str(passed[2])]
        argv += ["--", "sleep", "infinity"]
        try:
            self._init = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, pass_fds=passed, process_group=0,
            )  # fmt: skip
        finally:
            for fd in passed:
                os.close(fd)
        with os.fdopen(status_r, "rb") as status:
            line = status.readline()
            try:
                self._target = int(json.loads(line)["child-pid"])
            except (ValueError, KeyError):
                os.close(block_w)
                err = self._init.stderr.read().decode(errors="replace") if self._init.stderr else ""
                raise SandboxError(f"could not start the shared sandbox: {err[-800:]}") from None
            stack = self._public.stack() if self._public is not None else None
            self._holder_gate = StartGate(block_w, [], self._cgroup, stack)
            try:
                self._holder_gate.blocking(line)
            except BaseException:
                self._stop_holder()
                raise
        # bwrap's child sets up the mounts before it becomes `sleep`: enter only after that
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):  # bwrap's init, then its child
                kids = Path(f"/proc/{self._target}/task/{self._target}/children").read_text()
                for kid in kids.split():
                    if Path(f"/proc/{int(kid)}/comm").read_text().strip() == "sleep":
                        return
            if self._init.poll() is not None:
                break
            time.sleep(0.005)
        raise SandboxError("the shared sandbox's holder process did not start")

    async def _run_one(self, req: ExecRequest) -> RawResult:
        if self._target is None:
            await asyncio.to_thread(self._start)
        assert self._target is not None and self._cgroup is not None
        env = {**self.env, **req.env} if req.env else self.env
        if self.user not in ("root", "0", "0:0", "root:root"):
            name, _, group = self.user.partition(":")
            setpriv = ["setpriv", f"--reuid={name}", f"--regid={group or name}", "--init-groups"]
            cmd = [*setpriv, "--", *req.argv]
        else:
            cmd = list(req.argv)
        private = env.get(PRIVATE_LOGS)
        cgroup, caps = self._cgroup.path, _caps_mask()
        if private:  # the verifier: its own cgroup (its stragglers), logs and capability
            cgroup = cgroup / str(env[VERIFIER_CGROUP])
            cgroup.mkdir(exist_ok=True)
            caps |= 1 << _CAP_WAKE_ALARM
        join = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
        r, w = os.pipe()
        os.write(w, host_program())
        os.close(w)
        argv = ["/bin/sh", "-c", join, "sh", self._nsenter, "-t", str(self._target)]
        argv += ["-m", "-u", "-i", "-n", "-p", "-r", "--", f"{ENTER_DIR}/envlab-enter"]
        argv += ["--isolate", private] if private else []
        argv += [f"{caps:x}", str(r) if self.seccomp else "-1", req.cwd]
        argv += [f"{k}={v}" for k, v in env.items()]
        argv += ["--", "/bin/sh", "-c", 'exec "$@"', "sh", *cmd]
        staged = []
        for m in req.mounts:  # a mount for one command: its files, in the shared directory
            if m.target not in self._shared or m.writable:
                raise SandboxError(f"a shared sandbox cannot mount {m.target} for one command")
            await asyncio.to_thread(shutil.copytree, m.source, self._shared[m.target],
                                    symlinks=True, dirs_exist_ok=True)  # fmt: skip
            staged.append(m.target)
        try:
            raw = await self._run_to_files(argv, req, pass_fds=(r,))
        finally:
            os.close(r)
            for target in staged:
                await asyncio.to_thread(self.clear, target)
        if raw.returncode == 201 and raw.stderr.endswith(b"envlab: no such directory\n"):
            msg = f"cannot change to directory {req.cwd}: no such directory in the sandbox\n"
            return RawResult(b"", msg.encode(), 1, False, False, raw.duration_s)
        return raw

    async def _run_to_files(
        self, argv: list[str], req: ExecRequest, pass_fds: tuple[int, ...] = ()
    ) -> RawResult:
        """Run ``argv`` with its output in files, not pipes: a process it leaves running may
        write on (a pipe closed behind it would kill it with SIGPIPE)."""
        assert self.storage is not None
        out_path, err_path = (self.storage.fs / f"{n}.{uuid.uuid4().hex[:8]}" for n in "oe")
        t0 = time.perf_counter()
        with open(out_path, "w+b") as out, open(err_path, "w+b") as err:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE if req.stdin else subprocess.DEVNULL,
                stdout=out, stderr=err, process_group=0, pass_fds=pass_fds,
            )  # fmt: skip
            self._running.add(proc.pid)
            try:
                if req.stdin:
                    await asyncio.to_thread(_feed, proc, req.stdin)
                await asyncio.wait_for(asyncio.to_thread(proc.wait), req.timeout)
                timed_out = False
            except TimeoutError:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await asyncio.to_thread(proc.wait)
            finally:
                self._running.discard(proc.pid)
            streams = [_capped(f, req.output_limit) for f in (out, err)]
        for p in (out_path, err_path):
            p.unlink(missing_ok=True)  # a process still writing keeps its (unlinked) file
        code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return RawResult(
            stdout=streams[0][0], stderr=streams[1][0],
            returncode=128 - code if code < 0 else code, timed_out=timed_out,
            truncated=streams[0][1] or streams[1][1], duration_s=time.perf_counter() - t0,
        )  # fmt: skip

    def _stop_holder(self) -> None:
        """Kill the holder of the namespaces and stop their network stack (blocking)."""
        if self._init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._init.pid, 9)
            self._init.wait()
            self._init = None
        if self._holder_gate is not None:
            self._holder_gate.close()
            self._holder_gate = None

    async def kill_all(self) -> int:
        n = await super().kill_all()
        if self._init is not None or self._holder_gate is not None:
            await asyncio.to_thread(self._stop_holder)
        return n
