"""``ImageSandbox``: a sandbox whose whole filesystem is a fresh overlay of an image.

Every ``exec`` is a fresh ``bwrap`` (see ``runner``) over the image's layers, with this
sandbox's own upper layer on its bounded storage: what one command writes the next one sees,
the image itself is never written, and closing the sandbox drops the layer. ``extra_lowers``
stack more read-only layers on the image (the verifier grades the agent's frozen layer so,
with a fresh layer of its own above it). Commands run as the image's root (or its ``USER``)
under Docker's posture; their processes are accounted in the sandbox's cgroup, which is how
``kill_all`` finds every one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from envlab.core.errors import ConfigError
from envlab.sandbox.base import ExecRequest, Mount, Sandbox
from envlab.sandbox.bwrap import BubblewrapSandbox
from envlab.sandbox.gate import StartGate, seccomp_fd
from envlab.sandbox.gc import sweep_once
from envlab.sandbox.image.runner import (
    DEFAULT_PATH,
    command_args,
    host_network_trust,
    image_args,
)
from envlab.sandbox.image.squash import fit
from envlab.sandbox.image.store import Image, touch
from envlab.sandbox.limits import STORAGE_BYTES, Cgroup, GiB, Limits
from envlab.sandbox.network import PublicNetwork
from envlab.sandbox.owner import current_owner
from envlab.sandbox.process import RawResult, run_process
from envlab.sandbox.storage import Storage

log = logging.getLogger(__name__)
MEMORY_BYTES = 4 * GiB
"""Its memory when its limits set none."""


def image_env(image: Image, user: str = "root") -> dict[str, str]:
    """What a container of ``image`` starts with: Docker's PATH and HOME, then the image's."""
    home = "/root" if user in ("root", "0") else f"/home/{user.split(':')[0]}"
    return {"PATH": DEFAULT_PATH, "HOME": home, "HOSTNAME": "sandbox", **image.config.env}


def require_root() -> None:
    if os.geteuid() != 0:
        raise ConfigError(
            "running in an image needs envlab to run as root (its files belong to the image's "
            "root and its commands run as that root, without Docker's privileges); run as root "
            "or set the task to the host-filesystem mode"
        )


class ImageSandbox(Sandbox):
    """Build one with ``await ImageSandbox.create(image=..., ...)``."""

    backend: ClassVar[str] = "image"
    isolated: ClassVar[bool] = True

    def __init__(
        self,
        *,
        image: Image,
        extra_lowers: Sequence[Path] = (),
        limits: Limits | None = None,
        network: bool = False,
        env: Mapping[str, str] | None = None,
        mounts: Sequence[Mount] = (),
        workdir: str | None = None,
        user: str | None = None,
        name: str = "img",
        keep: bool = False,
        seccomp: bool = True,
        upper: tuple[Path, Path] | None = None,
    ) -> None:
        """``upper``: (upper, work) directories to write to instead of the sandbox's own
        storage (a build writes each instruction's layer so)."""
        require_root()
        limits = limits or Limits()
        if limits.storage_bytes is None:
            limits = limits.model_copy(update={"storage_bytes": STORAGE_BYTES})
        if limits.memory_bytes is None:  # the cgroup is how its processes are found
            limits = limits.model_copy(update={"memory_bytes": MEMORY_BYTES})
        self.limits, self.image, self.network, self.keep = limits, image, network, keep
        self._public = PublicNetwork.from_host() if network else None
        self.seccomp = seccomp
        self.user = user or image.config.user
        self.workdir = workdir or image.config.workdir or "/"
        self.shell = "/bin/bash" if self._has(("bin", "bash"), extra_lowers) else "/bin/sh"
        self.name = f"{name}-{uuid.uuid4().hex[:10]}"
        self.env = {**image_env(image, self.user), **(env or {})}
        self._mounts = list(mounts)
        if network:  # the registries as the host reaches them (its CA bundle, its proxy)
            trust_mounts, trust_env = host_network_trust()
            self._mounts += trust_mounts
            self.env = {**trust_env, **self.env}
        self._lowers = [*fit(image.lowers, list(extra_lowers)), *extra_lowers]
        touch([p for p in self._lowers if p.name == "upper" or p.name == "rootfs"])
        self._running: set[int] = set()
        self._one_at_a_time = asyncio.Lock()  # an upper layer takes one mount at a time
        self.storage: Storage | None = None
        sweep_once()  # a dead process's sandboxes (a lost Ray worker's) go first, as in bwrap
        try:
            if upper is None:
                self.storage = Storage.create(current_owner().boxes() / self.name, limits)
                upper = (*self.storage.make("upper", "work"),)  # type: ignore[assignment]
            assert upper is not None
            self._upper, self._work = upper
            os.chmod(self._upper, 0o755)
            self._cgroup = Cgroup.create(f"{current_owner().id}.{self.name}", limits)
            if self._cgroup is None:
                raise ConfigError(
                    "running in an image needs a writable cgroup (to find and kill every "
                    "process of the sandbox); none is writable on this host"
                )
        except BaseException:
            if self.storage is not None:
                self.storage.remove()
            raise
        self._prefix = image_args(
            self._lowers, (self._upper, self._work), network=network, mounts=self._mounts
        )

    def add_lowers(self, layers: Sequence[Path]) -> None:
        """Stack more read-only layers on top of the image's, before the first command (the
        verifier's carried workspace, filled once the sandbox's storage exists)."""
        self._lowers = [*fit(self._lowers, list(layers)), *layers]
        self._prefix = image_args(
            self._lowers, (self._upper, self._work), network=self.network, mounts=self._mounts
        )

    def _has(self, parts: tuple[str, ...], extra: Sequence[Path]) -> bool:
        return any(Path(layer, *parts).exists() for layer in [*self.image.lowers, *extra])

    @classmethod
    async def create(  # type: ignore[override]
        cls, template: Path | None = None, *, image: Image, **options: Any
    ) -> ImageSandbox:
        """A new sandbox over ``image`` (made in a worker thread); ``template`` is not used:
        the image is the workspace."""
        if template is not None:
            raise ConfigError("an ImageSandbox starts from its image, not from a template")
        return await asyncio.to_thread(lambda: cls(image=image, **options))

    @property
    def host_workdir(self) -> Path:
        """The sandbox's upper layer on the host: every file its commands changed."""
        return self._upper

    @property
    def upper(self) -> Path:
        return self._upper

    # --- running -----------------------------------------------------------------------------
    async def _run(self, request: ExecRequest) -> RawResult:
        async with self._one_at_a_time:
            return await self._run_one(request)

    def _gate(self, release_fd: int) -> StartGate:
        limits = [
            (resource.RLIMIT_CPU, self.limits.cpu_seconds),
            (resource.RLIMIT_FSIZE, self.limits.max_file_bytes),
            (resource.RLIMIT_NOFILE, self.limits.max_open_files),
        ]
        stack = self._public.stack() if self._public is not None else None
        kept = [(w, v) for w, v in limits if v is not None]
        return StartGate(release_fd, kept, self._cgroup, stack)

    async def _run_one(self, req: ExecRequest) -> RawResult:
        env = {**self.env, **req.env} if req.env else self.env
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()
        gate = self._gate(block_w)
        passed = [status_w, block_r]
        try:
            if self.seccomp:
                passed.append(seccomp_fd())
            argv = [*self._prefix]
            for m in req.mounts:
                argv += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
            argv += command_args(
                req.cwd, env, status_fd=status_w, block_fd=block_r,
                seccomp_fd=passed[2] if self.seccomp else None, user=self.user,
            )  # fmt: skip
        except BaseException:
            for fd in (status_r, block_w, *passed):
                os.close(fd)
            raise
        try:
            raw = await run_process(
                [*argv, *req.argv], timeout=req.timeout, output_limit=req.output_limit,
                stdin=req.stdin, pass_fds=passed, status_fd=status_r, on_status=gate,
                running=self._running,
            )  # fmt: skip
        except BaseException:
            gate.close()
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(self._kill_cgroup))
            raise
        gate.close()
        if raw.timed_out:
            await asyncio.to_thread(self._kill_cgroup)
        return self._started(raw, req.cwd)

    _started = staticmethod(BubblewrapSandbox._started)

    def _kill_cgroup(self) -> int:
        """SIGKILL every process in the cgroup until none is left (blocking)."""
        if self._cgroup is None:
            return 0
        killed, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 10:
            try:  # the sandbox's cgroup and those under it (a shared verifier's)
                procs = self._cgroup.path.glob("**/cgroup.procs")
                pids = [int(p) for f in procs for p in f.read_text().split()]
            except (OSError, ValueError):
                return killed
            if not pids:
                return killed
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            time.sleep(0.01)
        log.warning("processes of %s survived 10 s of SIGKILL", self.name)
        return killed

    # --- ending ------------------------------------------------------------------------------
    async def kill_all(self) -> int:
        self._ended = self._ended or "frozen (its processes were killed for grading)"
        n = 0
        for pid in list(self._running):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, 9)
                n += 1
        n += await asyncio.to_thread(self._kill_cgroup)
        t0 = time.monotonic()
        while self._running and time.monotonic() - t0 < 10:
            await asyncio.sleep(0.005)
        return n

    async def close(self) -> None:
        if self.closed:
            return
        await self.kill_all()
        self._ended = "closed"
        if self._public is not None:  # no network stack outlives the sandbox
            await self._public.settled()
        await asyncio.to_thread(self._dispose)

    def _dispose(self) -> None:
        if self._cgroup is not None:
            for _ in range(100):
                if self._cgroup.remove():
                    break
                time.sleep(0.01)
            self._cgroup = None
        storage, self.storage = self.storage, None
        if storage is None:
            return
        if self.keep:
            log.warning("keeping image sandbox %s: %s", self.name, storage.root)
            return
        storage.remove()
