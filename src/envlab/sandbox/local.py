"""The ``local`` backend: commands run on the host, in a temporary directory. NO isolation.

For debugging a task on a machine without bubblewrap. The command sees the whole host (files,
network, processes) and runs as you; only rlimits, the timeout and the output cap apply.
Paths under ``/app`` are translated to the temporary directory for the file helpers and the
working directory, not inside the command's own text.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from envlab.sandbox.base import Command, ExecResult, Sandbox, SandboxError
from envlab.sandbox.bwrap import APP
from envlab.sandbox.limits import Limits, rlimit_prefix
from envlab.sandbox.process import run_process
from envlab.sandbox.workspace import copy_tree

log = logging.getLogger(__name__)

WARNING = (
    "envlab sandbox backend 'local' gives NO ISOLATION: commands run on this host as you, "
    "with its files and network. Use it to debug, never for untrusted agents or for scores."
)


class LocalSandbox(Sandbox):
    """A temporary directory standing in for ``/app``; each command a plain subprocess."""

    backend: ClassVar[str] = "local"

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
        self.limits = limits or Limits()
        self.workdir = workdir
        self.keep = keep
        self.closed = False
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
    async def create(cls, template: Path | None = None, **kwargs: Any) -> LocalSandbox:
        box = cls(**kwargs)
        if template is not None:
            copy_tree(Path(template), box._app)
        return box

    @property
    def host_workdir(self) -> Path:
        return self._app

    def host_path(self, path: str) -> str:
        """The host path of an in-sandbox path: ``/app/...`` maps to the temporary directory."""
        p = PurePosixPath(self.resolve(path))
        if p == PurePosixPath(APP) or PurePosixPath(APP) in p.parents:
            return str(self._app / p.relative_to(APP))
        return str(p)

    async def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        max_output: int | None = None,
    ) -> ExecResult:
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        _, res = await self._run(argv, timeout, env, cwd, data, max_output, text=True)
        return res

    async def exec_bytes(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        max_output: int | None = None,
        cwd: str | None = None,
    ) -> tuple[bytes, ExecResult]:
        # the generic file helpers name in-sandbox paths: translate the ones under /app
        args = [self.host_path(a) if a.startswith(APP) else a for a in argv]
        return await self._run(args, timeout, None, cwd, stdin, max_output, text=False)

    async def _run(
        self,
        argv: list[str],
        timeout: float | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: bytes | None,
        max_output: int | None,
        *,
        text: bool,
    ) -> tuple[bytes, ExecResult]:
        if self.closed:
            raise SandboxError("this local sandbox is closed; create a new one")
        raw = await run_process(
            [*rlimit_prefix(self.limits, nproc=False), *argv],
            timeout=timeout if timeout is not None else self.limits.timeout_s,
            output_limit=max_output or self.limits.output_bytes,
            env={**self.env, **(env or {})},
            cwd=self.host_path(cwd or self.workdir),
            stdin=stdin,
            running=self._running,
        )
        return raw.stdout, ExecResult(
            stdout=raw.stdout.decode(errors="replace") if text else "",
            stderr=raw.stderr.decode(errors="replace"),
            exit_code=raw.returncode,
            timed_out=raw.timed_out,
            truncated=raw.truncated,
            duration_s=raw.duration_s,
        )

    async def kill_all(self) -> int:
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
        self.closed = True
        if not self.keep:
            shutil.rmtree(self._root, ignore_errors=True)
