"""Sandboxes: a fresh isolated workspace per episode, commands run in it under limits.

    box = await backend("bwrap").create(template=Path("ws"))
    async with box:
        result = await box.exec("ls -la", timeout=10)

Backends, by name (``backend(name)``): ``bwrap`` (bubblewrap, the default on Linux) and
``local`` (no isolation, for running commands of your own; warns loudly). Every backend has
the same ``create`` and ``exec``. docs/sandbox.md describes the isolation, the limits
(``storage_bytes``: a filesystem per sandbox), the seccomp filter, the verifier's overlay and
``envlab gc``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from envlab.core.errors import ConfigError
from envlab.sandbox.base import (
    APP,
    Command,
    ExecRequest,
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

BackendName = Literal["bwrap", "local"]
BACKENDS: dict[str, type[Sandbox]] = {"bwrap": BubblewrapSandbox, "local": LocalSandbox}


def backend(name: str) -> type[Sandbox]:
    """The sandbox class of the backend ``name`` (``bwrap`` or ``local``); make a sandbox with
    ``await backend(name).create(template, ...)``."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(
            f"unknown sandbox backend {name!r}; choose one of: {', '.join(BACKENDS)}"
        ) from None


async def create_sandbox(
    name: str = "bwrap", *, template: Path | None = None, **options: Any
) -> Sandbox:
    """A new sandbox of the backend ``name`` whose workspace starts as a copy of ``template``
    (``options``: those of ``Sandbox.create``)."""
    return await backend(name).create(template, **options)


__all__ = [
    "APP",
    "BACKENDS",
    "BackendName",
    "BubblewrapSandbox",
    "Command",
    "ExecRequest",
    "ExecResult",
    "GiB",
    "Limits",
    "LocalSandbox",
    "MiB",
    "Mount",
    "Sandbox",
    "SandboxError",
    "SandboxFileError",
    "backend",
    "copy_tree",
    "create_sandbox",
    "scratch_dir",
    "scrub_tree",
]
