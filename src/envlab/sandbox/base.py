"""The ``Sandbox`` protocol: a fresh isolated workspace, commands run in it, files in and out."""

from __future__ import annotations

import io
import shlex
import tarfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, ClassVar, Self

from envlab.core.errors import EnvlabError, InfraError
from envlab.sandbox.limits import Limits


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


class Sandbox(ABC):
    """A workspace at ``workdir`` (``/app``) and a way to run commands in it.

    Every ``exec`` is bounded by the sandbox's ``Limits`` and its own wall-clock ``timeout``;
    at the timeout, or when the awaiting task is cancelled, every process it started is killed.
    File helpers run inside the sandbox, so a symlink planted in the workspace can never make
    the host read or write outside it.
    """

    backend: ClassVar[str] = ""
    workdir: str = "/app"
    limits: Limits

    # --- the primitive -----------------------------------------------------------------------
    @abstractmethod
    async def exec(
        self,
        cmd: Command,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a shell string for ``bash -c``, or an argv) and wait for it."""

    @abstractmethod
    async def exec_bytes(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        max_output: int | None = None,
        cwd: str | None = None,
    ) -> tuple[bytes, ExecResult]:
        """Run ``argv``; return its raw stdout (up to ``max_output`` bytes) and how it ended."""

    @abstractmethod
    async def kill_all(self) -> int:
        """Kill every process of the sandbox; return how many there were."""

    @abstractmethod
    async def close(self) -> None:
        """Kill everything and delete the workspace (unless kept for debugging)."""

    @property
    @abstractmethod
    def host_workdir(self) -> Path:
        """Where the workspace lives on the host (for the engine only; never follow its links)."""

    # --- files -------------------------------------------------------------------------------
    def resolve(self, path: str) -> str:
        """An absolute in-sandbox path; relative paths are relative to ``workdir``."""
        p = PurePosixPath(path)
        return str(p if p.is_absolute() else PurePosixPath(self.workdir) / p)

    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        target = self.resolve(path)
        data, res = await self.exec_bytes(
            ["cat", "--", target], max_output=max_bytes + 1, timeout=60
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot read {target}: {_reason(res)}")
        if len(data) > max_bytes:
            raise SandboxFileError(f"{target} is larger than {max_bytes} bytes; read less of it")
        return data

    async def write_file(self, path: str, content: bytes | str, *, mode: int = 0o644) -> None:
        target = self.resolve(path)
        data = content.encode() if isinstance(content, str) else content
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" -- "$1"'
        _, res = await self.exec_bytes(
            ["sh", "-c", script, "sh", target, f"{mode:o}"], stdin=data, timeout=60
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot write {target}: {_reason(res)}")

    async def upload(self, src: Path, dest: str) -> None:
        """Copy a host file or directory into the sandbox: a directory's contents go in ``dest``."""
        src = Path(src)
        if src.is_file():
            await self.write_file(dest, src.read_bytes(), mode=src.stat().st_mode & 0o777)
            return
        if not src.is_dir():
            raise SandboxFileError(f"cannot upload {src}: no such file or directory on the host")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name)
        target = self.resolve(dest)
        q = shlex.quote(target)
        _, res = await self.exec_bytes(
            ["sh", "-c", f"mkdir -p -- {q} && tar -x --no-same-owner -f - -C {q}"],
            stdin=buf.getvalue(),
            timeout=120,
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot upload {src} to {target}: {_reason(res)}")

    async def download(self, src: str, dest: Path, *, max_bytes: int = 256 << 20) -> None:
        """Copy a sandbox file or directory to the host path ``dest`` (links stay links)."""
        source = PurePosixPath(self.resolve(src))
        data, res = await self.exec_bytes(
            ["tar", "-c", "-f", "-", "-C", str(source.parent), source.name],
            max_output=max_bytes + 1,
            timeout=120,
        )
        if res.exit_code != 0:
            raise SandboxFileError(f"cannot download {source}: {_reason(res)}")
        if len(data) > max_bytes:
            raise SandboxFileError(f"{source} is larger than {max_bytes} bytes as a tar archive")
        dest = Path(dest)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = tar.getmembers()
            for m in members:  # re-root the archive at dest
                rel = PurePosixPath(m.name).relative_to(source.name)
                m.name = str(PurePosixPath(dest.name) / rel) if str(rel) != "." else dest.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest.parent, members=members, filter="data")

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


def _reason(res: ExecResult) -> str:
    if res.timed_out:
        return "timed out"
    return (res.stderr.strip() or res.stdout.strip() or f"exit code {res.exit_code}")[-500:]
