"""The ``Sandbox`` protocol: a fresh workspace, commands run in it, files in and out.

Every backend implements one primitive, ``_run(request)``; ``exec`` and ``exec_bytes`` (one
signature for every backend) and the file helpers are built on it here. Nothing that blocks
(making the workspace, copying trees, building archives) runs on the event loop.
"""

from __future__ import annotations

import asyncio
import io
import shlex
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, ClassVar, Self

from envlab.core.errors import EnvlabError, InfraError
from envlab.sandbox.limits import Limits
from envlab.sandbox.process import RawResult

APP = "/app"
"""Where the workspace is, as commands see it."""


class SandboxError(InfraError):
    """The sandbox itself failed (could not start, died, refused): never the agent's fault."""


class SandboxFileError(EnvlabError):
    """A file operation inside the sandbox failed (no such file, not allowed, too big)."""


@dataclass(slots=True)
class ExecResult:
    """How one command ended. ``exit_code`` is ``128 + N`` for a command killed by signal N."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    truncated: bool = False
    """True when stdout or stderr exceeded the cap; the middle was replaced by a marker."""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def to_dict(self) -> dict[str, Any]:
        return {
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True, slots=True)
class Mount:
    """A host path seen inside the sandbox at ``target``; read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False


Command = str | Sequence[str]


@dataclass(frozen=True, slots=True)
class ExecRequest:
    """One command as a backend's ``_run`` receives it, the sandbox's defaults applied."""

    argv: tuple[str, ...]
    timeout: float | None
    output_limit: int
    cwd: str
    """Absolute, in the sandbox."""
    env: Mapping[str, str] = field(default_factory=dict)
    """On top of the sandbox's own environment."""
    stdin: bytes | None = None
    mounts: tuple[Mount, ...] = ()


class Sandbox(ABC):
    """A workspace at ``workdir`` (under ``/app``) and a way to run commands in it.

    Make one with ``await Backend.create(template, ...)`` (``envlab.sandbox.backend(name)``
    gives the class). Every ``exec`` is bounded by the sandbox's ``Limits`` and its own
    wall-clock ``timeout``; at the timeout, or when the awaiting task is cancelled, every
    process it started is killed. File helpers run inside the sandbox, so a symlink planted in
    the workspace can never make the host read or write outside it.
    """

    backend: ClassVar[str] = ""
    isolated: ClassVar[bool] = True
    """Whether a command is kept from the host (its files, processes, network)."""
    workdir: str = APP
    shell: str = "/bin/bash"
    limits: Limits
    _ended: str | None = None
    """Why no command may run any more (``closed``, ``stopped``), or None."""

    @classmethod
    @abstractmethod
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
    ) -> Self:
        """A new sandbox whose workspace starts as a copy of the host directory ``template``;
        ``mounts`` are seen by every command, ``network`` gives the outside network through a
        user-space stack (sandbox/network.py), never the host's own."""

    # --- running: one template over the backend's ``_run`` -----------------------------------
    async def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        mounts: Sequence[Mount] = (),
        max_output: int | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string for ``bash -c``, or an argv) and wait for it.

        ``timeout`` defaults to ``limits.timeout_s``, ``max_output`` (bytes kept of stdout and
        of stderr, each) to ``limits.output_bytes``; ``cwd`` is relative to ``workdir``;
        ``mounts`` are seen by this command only."""
        argv = [self.shell, "-c", cmd] if isinstance(cmd, str) else list(cmd)
        raw = await self._exec(argv, timeout, env, cwd, stdin, mounts, max_output)
        return _result(raw, text=True)

    async def exec_bytes(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
        mounts: Sequence[Mount] = (),
        max_output: int | None = None,
    ) -> tuple[bytes, ExecResult]:
        """As ``exec``, for an argv; return its raw stdout (the result's ``stdout`` is empty)."""
        raw = await self._exec(list(argv), timeout, env, cwd, stdin, mounts, max_output)
        return raw.stdout, _result(raw, text=False)

    async def _exec(
        self,
        argv: list[str],
        timeout: float | None,
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: bytes | str | None,
        mounts: Sequence[Mount],
        max_output: int | None,
    ) -> RawResult:
        if self._ended is not None:
            raise SandboxError(
                f"this {self.backend} sandbox is {self._ended}; no more commands can run in it"
            )
        request = ExecRequest(
            argv=tuple(argv),
            timeout=timeout if timeout is not None else self.limits.timeout_s,
            output_limit=max_output or self.limits.output_bytes,
            cwd=self.resolve(cwd) if cwd else self.workdir,
            env=dict(env or {}),
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            mounts=tuple(mounts),
        )
        return await self._run(request)

    @abstractmethod
    async def _run(self, request: ExecRequest) -> RawResult:
        """Run one command; raise ``SandboxError`` when the sandbox could not run it at all."""

    @abstractmethod
    async def kill_all(self) -> int:
        """Refuse new commands and kill every process of the sandbox; return how many."""

    @abstractmethod
    async def close(self) -> None:
        """Kill everything and delete the workspace (unless kept for debugging)."""

    @property
    def closed(self) -> bool:
        return self._ended == "closed"

    @property
    @abstractmethod
    def host_workdir(self) -> Path:
        """Where the workspace lives on the host (for the engine only; never follow its links)."""

    # --- files -------------------------------------------------------------------------------
    def resolve(self, path: str) -> str:
        """An absolute in-sandbox path; relative paths are relative to ``workdir``."""
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self.workdir) / p)

    def command_path(self, path: str) -> str:
        """``path`` as a command of this sandbox names it (``resolve``d)."""
        return self.resolve(path)

    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        target = self.command_path(path)
        data, res = await self.exec_bytes(
            ["cat", "--", target], max_output=max_bytes + 1, timeout=60
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot read {self.resolve(path)}: {_reason(res)}")
        if len(data) > max_bytes:
            raise SandboxFileError(
                f"{self.resolve(path)} is larger than {max_bytes} bytes; read less of it"
            )
        return data

    async def write_file(self, path: str, content: bytes | str, *, mode: int = 0o644) -> None:
        target = self.command_path(path)
        data = content.encode() if isinstance(content, str) else content
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        _, res = await self.exec_bytes(
            ["sh", "-c", script, "sh", target, f"{mode:o}"], stdin=data, timeout=60
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot write {self.resolve(path)}: {_reason(res)}")

    async def upload(self, src: Path, dest: str) -> None:
        """Copy a host file or directory into the sandbox: a directory's contents go in ``dest``."""
        src = Path(src)
        if await asyncio.to_thread(src.is_file):
            data, mode = await asyncio.to_thread(lambda: (src.read_bytes(), src.stat().st_mode))
            await self.write_file(dest, data, mode=mode & 0o777)
            return
        archive = await asyncio.to_thread(_tar_of_dir, src)
        q = shlex.quote(self.command_path(dest))
        _, res = await self.exec_bytes(
            ["sh", "-c", f"mkdir -p -- {q} && tar -x --no-same-owner -f - -C {q}"],
            stdin=archive,
            timeout=120,
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot upload {src} to {self.resolve(dest)}: {_reason(res)}")

    async def download(self, src: str, dest: Path, *, max_bytes: int = 256 << 20) -> None:
        """Copy a sandbox file or directory to the host path ``dest`` (links stay links)."""
        source = PurePosixPath(self.command_path(src))
        data, res = await self.exec_bytes(
            ["tar", "-c", "-f", "-", "-C", str(source.parent), source.name],
            max_output=max_bytes + 1,
            timeout=120,
        )
        shown = self.resolve(src)
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot download {shown}: {_reason(res)}")
        if len(data) > max_bytes:
            raise SandboxFileError(f"{shown} is larger than {max_bytes} bytes as a tar archive")
        await asyncio.to_thread(_extract_as, data, source.name, Path(dest))

    # --- context manager ---------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _result(raw: RawResult, *, text: bool) -> ExecResult:
    return ExecResult(
        stdout=raw.stdout.decode(errors="replace") if text else "",
        stderr=raw.stderr.decode(errors="replace"),
        exit_code=raw.returncode,
        timed_out=raw.timed_out,
        truncated=raw.truncated,
        duration_s=raw.duration_s,
    )


def _tar_of_dir(src: Path) -> bytes:
    if not src.is_dir():
        raise SandboxFileError(f"cannot upload {src}: no such file or directory on the host")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()


def _extract_as(data: bytes, name: str, dest: Path) -> None:
    """Extract an archive of the one entry ``name`` as ``dest`` (re-rooted there)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        for m in members:
            rel = PurePosixPath(m.name).relative_to(name)
            m.name = str(PurePosixPath(dest.name) / rel) if str(rel) != "." else dest.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tar.extractall(dest.parent, members=members, filter="data")


def _reason(res: ExecResult) -> str:
    if res.timed_out:
        return "timed out"
    return (res.stderr.strip() or res.stdout.strip() or f"exit code {res.exit_code}")[-500:]
