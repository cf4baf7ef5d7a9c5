"""The bubblewrap backend: every ``exec`` is a fresh ``bwrap`` over the sandbox's workspace.

What a command sees: the host's system directories and an allow-list of ``/etc`` read-only,
the Python toolchain read-only, the workspace read-write at ``/app``, its own ``/tmp`` (kept
between commands of one sandbox), its own network namespace (loopback only; with ``network``,
the outside through a user-space stack, never the host's), its own PID, IPC and UTS namespaces,
an empty environment plus what the sandbox sets. It runs as a host uid of its own (one per
sandbox, never root), under rlimits, and dies with envlab. A command's processes end with it:
when the command exits, the PID namespace goes and takes any background process along.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from envlab.core.errors import ConfigError
from envlab.sandbox.base import APP, ExecRequest, Mount, Sandbox, SandboxError
from envlab.sandbox.bwrap_args import mount_args, static_args
from envlab.sandbox.gate import StartGate, pidns, seccomp_fd
from envlab.sandbox.gc import sweep_once
from envlab.sandbox.layout import bwrap_binary, host_layout
from envlab.sandbox.limits import Cgroup, GiB, Limits
from envlab.sandbox.network import PublicNetwork
from envlab.sandbox.owner import Owner, current_owner
from envlab.sandbox.process import RawResult, run_process
from envlab.sandbox.storage import Storage
from envlab.sandbox.uids import kill_uid, lease_uid
from envlab.sandbox.workspace import chown_tree, copy_tree, state_dir

log = logging.getLogger(__name__)

OVERLAY_STORAGE_BYTES = 4 * GiB
"""The bound of an overlay's writes when the limits set no ``storage_bytes``."""


def base_env(path: str) -> dict[str, str]:
    """What every command's environment starts from."""
    return {
        "PATH": path,
        "HOME": APP,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
        "USER": "agent",
    }


class BubblewrapSandbox(Sandbox):
    """A workspace on the host and a ``bwrap`` command line that isolates each command in it.

    Build one with ``await BubblewrapSandbox.create(template=...)``: ``template`` is copied to
    a fresh workspace. ``app_dir`` instead adopts an existing directory as the workspace, bound
    read-write; with ``app_overlay=True`` it is never written: ``/app`` is an overlay whose
    lower layer is ``app_dir`` and whose writes go to the sandbox's own bounded storage (the
    verifier grades the agent's frozen workspace so, without copying it). ``seccomp=False``
    drops the system-call filter (sandbox/seccomp.py), for measuring it.

    The constructor and ``prepare`` block (files, a filesystem, a cgroup): ``create`` runs both
    in a worker thread, never on the event loop.
    """

    backend: ClassVar[str] = "bwrap"
    isolated: ClassVar[bool] = True

    def __init__(
        self,
        *,
        app_dir: Path | None = None,
        app_overlay: bool = False,
        limits: Limits | None = None,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        workdir: str = APP,
        name: str = "sbx",
        keep: bool = False,
        seccomp: bool = True,
    ) -> None:
        if not (workdir == APP or workdir.startswith(APP + "/")):
            raise ConfigError(f"workdir must be {APP} or below it, got {workdir!r}")
        if app_overlay and (app_dir is None or not Path(app_dir).is_dir()):
            raise ConfigError(f"app_overlay=True needs app_dir, an existing directory: {app_dir}")
        limits = limits or Limits()
        if app_overlay and limits.storage_bytes is None:
            limits = limits.model_copy(update={"storage_bytes": OVERLAY_STORAGE_BYTES})
        self.limits = limits
        self.workdir = workdir
        self.network = network
        self._public = PublicNetwork.from_host() if network else None
        self.keep = keep
        self.seccomp = seccomp
        self.name = f"{name}-{uuid.uuid4().hex[:10]}"
        self._dirty = False  # an exec was killed: sweep its uid before letting the uid go
        self._running: set[int] = set()
        self._state = state_dir()
        self._layout = host_layout(self._state)
        self.shell = self._layout.bash
        self._rootless = os.geteuid() != 0
        sweep_once()
        owner = current_owner()
        self._adopted = app_dir is not None
        self._overlay = app_overlay
        self._one_at_a_time = asyncio.Lock() if app_overlay else None
        self._lease = lease_uid()
        self.uid = self._lease.uid
        self._cgroup: Cgroup | None = None
        self.storage: Storage | None = None
        try:
            self._make_storage(owner, app_dir)
        except BaseException:
            self._lease.release()
            if self.storage is not None:
                self.storage.remove()
            raise
        self.env = {**base_env(self._layout.path), **(env or {})}
        self._mounts = list(mounts)
        self._prefix = static_args(
            self._layout,
            app=self._app,
            tmp=self._tmp,
            overlay=(self._upper, self._work) if app_overlay else None,
            network=network,
            rootless=self._rootless,
            mounts=self._mounts,
        )

    def _make_storage(self, owner: Owner, app_dir: Path | None) -> None:
        self.storage = Storage.create(owner.boxes() / self.name, self.limits)
        (self._tmp,) = self.storage.make("tmp")
        if self._overlay:
            assert app_dir is not None
            self._upper, self._work = self.storage.make("upper", "work")
            self._upper.chmod(Path(app_dir).stat().st_mode & 0o7777)
        self._app = Path(app_dir) if app_dir is not None else self.storage.make("app")[0]
        if not self._adopted:
            self._app.chmod(0o755)
        self._cgroup = Cgroup.create(f"{owner.id}.{self.name}", self.limits)

    @classmethod
    async def create(
        cls,
        template: Path | None = None,
        *,
        limits: Limits | None = None,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        workdir: str = APP,
        name: str = "sbx",
        keep: bool = False,
        app_dir: Path | None = None,
        app_overlay: bool = False,
        seccomp: bool = True,
    ) -> BubblewrapSandbox:
        """A sandbox whose workspace starts as a copy of ``template`` (a host directory), or
        adopts ``app_dir`` (see the class); made and prepared in a worker thread."""
        options: dict[str, Any] = dict(
            limits=limits, network=network, env=env, mounts=mounts, workdir=workdir, name=name,
            keep=keep, app_dir=app_dir, app_overlay=app_overlay, seccomp=seccomp,
        )  # fmt: skip
        return await asyncio.to_thread(cls._build, template, options)

    @classmethod
    def _build(cls, template: Path | None, options: dict[str, Any]) -> BubblewrapSandbox:
        box = cls(**options)
        try:
            box.prepare(template)
        except BaseException:
            box._ended = "closed"
            box._dispose()
            raise
        return box

    def prepare(self, template: Path | None = None) -> None:
        """Copy ``template`` into the workspace and hand the writable paths to the sandbox uid.
        Blocking: ``create`` calls it in a worker thread.

        With ``app_overlay``, ``app_dir`` (the overlay's lower layer) is given to the sandbox
        uid in place, so that its commands may change what they see: only the owner changes,
        never a file's content or mode."""
        if template is not None:
            try:
                copy_tree(Path(template), self._app)
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                raise ConfigError(
                    f"the workspace template {template} does not fit in the sandbox's storage "
                    f"(storage_bytes={self.limits.storage_bytes}, max_inodes="
                    f"{self.limits.max_inodes}); raise the task's storage limit"
                ) from None
        if self._rootless:
            return
        chown_tree(self._app, self.uid, self.uid)
        os.chown(self._tmp, self.uid, self.uid)
        if self._overlay:
            os.chown(self._upper, self.uid, self.uid)
        for m in self._mounts:
            if m.writable:
                chown_tree(m.source, self.uid, self.uid)

    @property
    def host_workdir(self) -> Path:
        """The workspace on the host; with ``app_overlay``, its read-only lower layer (the
        sandbox's writes are in its own storage)."""
        return self._app

    @property
    def storage_kind(self) -> str:
        """``ext4``, ``tmpfs`` or ``dir`` (unbounded but per file): see sandbox/storage.py."""
        return self.storage.kind if self.storage is not None else "dir"

    # --- the command line --------------------------------------------------------------------
    def _argv(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str],
        cwd: str,
        extra: Sequence[Mount],
        status_fd: int,
        block_fd: int,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        a = list(self._prefix)
        made: set[str] = set(self._layout.dirs)
        for m in extra:
            a += mount_args(m, made)
        a += ["--remount-ro", "/", "--chdir", cwd]
        a += ["--json-status-fd", str(status_fd), "--block-fd", str(block_fd)]
        if seccomp_fd is not None:
            a += ["--seccomp", str(seccomp_fd)]
        for k, v in env.items():
            a += ["--setenv", k, v]
        a.append("--")
        if not self._rootless:
            a += [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        return [*a, *cmd]

    def _gate(self, release_fd: int) -> StartGate:
        fsize = self.storage.rlimit_fsize(self.limits) if self.storage else None
        limits = [
            (resource.RLIMIT_CPU, self.limits.cpu_seconds),
            (resource.RLIMIT_AS, self.limits.address_space_bytes),
            (resource.RLIMIT_FSIZE, fsize or self.limits.max_file_bytes),
            (resource.RLIMIT_NOFILE, self.limits.max_open_files),
        ]
        if not self._rootless:  # per uid: without a uid of its own it would count the user's
            limits.append((resource.RLIMIT_NPROC, self.limits.max_processes))
        stack = self._public.stack() if self._public is not None else None
        return StartGate(release_fd, limits, self._cgroup, stack)

    # --- running -----------------------------------------------------------------------------
    async def _run(self, request: ExecRequest) -> RawResult:
        # an overlay's upper layer takes one mount at a time
        async with self._one_at_a_time or contextlib.nullcontext():
            return await self._run_one(request)

    async def _run_one(self, req: ExecRequest) -> RawResult:
        env = {**self.env, **req.env} if req.env else self.env
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        gate = self._gate(block_w)
        passed = [status_w, block_r]
        try:
            if self.seccomp:
                passed.append(seccomp_fd())
            full = self._argv(req.argv, env, req.cwd, req.mounts, status_w, block_r, *passed[2:])
        except BaseException:
            for fd in (status_r, block_w, *passed):
                os.close(fd)
            raise
        try:
            raw = await run_process(
                full,
                timeout=req.timeout,
                output_limit=req.output_limit,
                stdin=req.stdin,
                pass_fds=passed,
                status_fd=status_r,
                on_status=gate,
                running=self._running,
            )
        except BaseException:  # cancelled: make sure nothing of the sandbox runs on
            gate.close()
            self._dirty = True
            if not self._rootless:
                # off the event loop: the scan and waits must not stall other episodes
                with contextlib.suppress(Exception):
                    await asyncio.shield(asyncio.to_thread(kill_uid, self.uid))
            raise
        gate.close()  # when bwrap failed before it reported a child
        if raw.timed_out and not self._rootless:
            # the namespace is being torn down; wait until every process of the command is gone
            await asyncio.to_thread(kill_uid, self.uid, pidns=pidns(raw.status))
        return self._started(raw, req.cwd)

    @staticmethod
    def _started(raw: RawResult, where: str) -> RawResult:
        """``raw``, once sure that bwrap started the command (else ``SandboxError``)."""
        if raw.timed_out or b'"exit-code"' in raw.status:
            return raw
        # bwrap stopped before the command started: ours, unless the cwd was wrong
        stderr = raw.stderr.decode(errors="replace")
        if "Can't chdir" in stderr:
            msg = f"cannot change to directory {where}: no such directory in the sandbox\n"
            return RawResult(b"", msg.encode(), 1, False, False, raw.duration_s)
        raise SandboxError(
            f"bubblewrap could not start the command (exit {raw.returncode}): "
            f"{stderr.strip()[-800:]}. Check that bwrap works on this host: "
            f"run `{bwrap_binary()} --ro-bind / / true`."
        )

    # --- ending ------------------------------------------------------------------------------
    async def kill_all(self) -> int:
        """Refuse new commands, kill every process of the sandbox, and check that none is left."""
        self._ended = self._ended or "frozen (its processes were killed for grading)"
        n = 0
        for pid in list(self._running):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)
                n += 1
        if not self._rootless:
            n += await asyncio.to_thread(kill_uid, self.uid)
        t0 = time.monotonic()
        while self._running and time.monotonic() - t0 < 10:  # their exec() calls return
            await asyncio.sleep(0.005)
        return n

    async def close(self) -> None:
        if self.closed:
            return
        if self._running or self._dirty or self._cgroup is not None:
            await self.kill_all()
        self._ended = "closed"
        if self._public is not None:  # no network stack outlives the sandbox
            await self._public.settled()
        await asyncio.to_thread(self._dispose)

    def _dispose(self) -> None:
        """Remove the cgroup, give the uid back, delete the storage (blocking; once)."""
        if self._cgroup is not None:
            for _ in range(100):
                if self._cgroup.remove():
                    break
                time.sleep(0.01)
            else:
                log.warning("cgroup %s could not be removed", self._cgroup.path)
            self._cgroup = None
        self._lease.release()
        storage, self.storage = self.storage, None
        if storage is None:
            return
        if self.keep:
            log.warning("keeping sandbox %s: %s (`envlab gc` removes it once this process has "
                        "ended)", self.name, storage.root)  # fmt: skip
            return
        # an adopted workspace (the verifier's view of the agent's) is outside the storage:
        # not ours to delete
        storage.remove()
