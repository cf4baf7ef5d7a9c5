"""Sandboxes: a fresh isolated workspace per episode, commands run in it under limits.

    async with await create_sandbox(template=Path("ws")) as box:
        result = await box.exec("ls -la", timeout=10)

Backends: ``bwrap`` (bubblewrap, the default on Linux) and ``local`` (no isolation, debugging
only, warns loudly). docs/sandbox.md describes the isolation, the limits (``storage_bytes``: a
filesystem per sandbox), the seccomp filter, the verifier's overlay and ``envlab gc``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envlab.core.errors import ConfigError
from envlab.sandbox.base import (
    Command,
    ExecResult,
    Mount,
    Sandbox,
    SandboxError,
    SandboxFileError,
)
from envlab.sandbox.bwrap import BubblewrapSandbox
from envlab.sandbox.limits import GiB, Limits, MiB
from envlab.sandbox.local import LocalSandbox
from envlab.sandbox.owner import scratch_dir
from envlab.sandbox.workspace import copy_tree, scrub_tree

BACKENDS: dict[str, type[Sandbox]] = {"bwrap": BubblewrapSandbox, "local": LocalSandbox}


async def create_sandbox(
    backend: str = "bwrap", *, template: Path | None = None, **kwargs: Any
) -> Sandbox:
    """A new sandbox of ``backend`` whose workspace starts as a copy of ``template``."""
    if backend == "bwrap":
        return await BubblewrapSandbox.create(template, **kwargs)
    if backend == "local":
        kwargs = {k: v for k, v in kwargs.items() if k not in ("network", "mounts")}
        return await LocalSandbox.create(template, **kwargs)
    raise ConfigError(f"unknown sandbox backend {backend!r}; choose one of: {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "BubblewrapSandbox",
    "Command",
    "ExecResult",
    "GiB",
    "Limits",
    "LocalSandbox",
    "MiB",
    "Mount",
    "Sandbox",
    "SandboxError",
    "SandboxFileError",
    "copy_tree",
    "create_sandbox",
    "scratch_dir",
    "scrub_tree",
]
