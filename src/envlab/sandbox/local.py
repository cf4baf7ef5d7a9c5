"""The ``local`` backend: commands run on the host, in a temporary directory. NO isolation.

For running commands of your own through the sandbox API on a machine without bubblewrap (a
task's setup by hand, a new backend's tests). A command sees the whole host (files, network,
processes) and runs as you; only rlimits (``prlimit``), the timeout and the output cap apply.
``network=False`` is not honoured (there is nothing to take the network away with) and mounts
are refused (there is no mount namespace to show them in). The file helpers translate paths
under ``/app`` to the temporary directory, and so does the working directory; the text of a
command is run as it is, so a command that names ``/app`` does not find the workspace.

Never for an agent whose score counts: an agent on the host can rewrite the tests that grade
it. Task folders refuse this backend (``isolated = False``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import ClassVar

from envlab.core.errors import ConfigError
from envlab.sandbox.base import APP, ExecRequest, Mount, Sandbox
from envlab.sandbox.limits import Limits, rlimit_prefix
from envlab.sandbox.process import RawResult, run_process
from envlab.sandbox.workspace import copy_tree

log = logging.getLogger(__name__)

WARNING = (
    "envlab sandbox backend 'local' gives NO ISOLATION: commands run on this host as you, "
    "with its files and network. Use it to debug, never for untrusted agents or for scores."
)


class LocalSandbox(Sandbox):
    """A temporary directory standing in for ``/app``; each command a plain subprocess."""

    backend: ClassVar[str] = "local"
    isolated: ClassVar[bool] = False

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str = APP,
        name: str = "local",
        keep: bool = False,
    ) -> None:
        warnings.warn(WARNING, RuntimeWarning, stacklevel=2)
        log.warning(WARNING)
        if not (workdir == APP or workdir.startswith(APP + "/")):
            raise ConfigError(f"workdir must be {APP} or below it, got {workdir!r}")
        self.limits = limits or Limits()
        self.workdir = workdir
        self.shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
        self.keep = keep
        self._running: set[int] = set()
        self._root = Path(tempfile.mkdtemp(prefix=f"envlab-{name}-"))
        self._app = self._root / "app"
        self._app.mkdir()
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._app),
            "LANG": "C.UTF-8",
            "TMPDIR": str(self._root),
            **(env or {}),
        }

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
        name: str = "local",
        keep: bool = False,
    ) -> LocalSandbox:
        """A temporary workspace, a copy of ``template``; ``network`` is the host's whatever it
        says (see the module), ``mounts`` are refused."""
        _refuse_mounts(mounts)
        box = await asyncio.to_thread(
            lambda: cls(limits=limits, env=env, workdir=workdir, name=name, keep=keep)
        )
        if template is not None:
            try:
                await asyncio.to_thread(copy_tree, Path(template), box._app)
            except BaseException:
                await box.close()
                raise
        return box

    @property
    def host_workdir(self) -> Path:
        return self._app

    def command_path(self, path: str) -> str:
        """The host path of an in-sandbox path: ``/app/...`` maps to the temporary directory."""
        p = PurePosixPath(self.resolve(path))
        if p == PurePosixPath(APP) or PurePosixPath(APP) in p.parents:
            return str(self._app / p.relative_to(APP))
        return str(p)

    async def _run(self, request: ExecRequest) -> RawResult:
        _refuse_mounts(request.mounts)
        return await run_process(
            [*rlimit_prefix(self.limits, nproc=False), *request.argv],
            timeout=request.timeout,
            output_limit=request.output_limit,
            env={**self.env, **request.env},
            cwd=self.command_path(request.cwd),
            stdin=request.stdin,
            running=self._running,
        )

    async def kill_all(self) -> int:
        self._ended = self._ended or "stopped (its processes were killed)"
        n = 0
        for pid in list(self._running):
            try:
                os.killpg(pid, 9)
                n += 1
            except ProcessLookupError:
                pass
        return n

    async def close(self) -> None:
        if self.closed:
            return
        await self.kill_all()
        self._ended = "closed"
        if not self.keep:
            await asyncio.to_thread(shutil.rmtree, self._root, True)


def _refuse_mounts(mounts: Sequence[Mount]) -> None:
    if mounts:
        m = mounts[0]
        raise ConfigError(
            f"the local backend cannot show {m.source} at {m.target}: it has no mount "
            "namespace (commands run on the host as they are); use the bwrap backend"
        )
