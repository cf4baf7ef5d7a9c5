"""Resource limits of a sandbox: rlimits always, a cgroup for total memory when the host allows."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envlab.core.errors import ConfigError

log = logging.getLogger(__name__)

GiB = 1 << 30
MiB = 1 << 20
STORAGE_BYTES = 8 * GiB
"""The bound of an agent's sandbox's writes when nothing sets one (a task folder with no
``storage_mb``), the same in every runtime: the host's disk is never the agent's to fill."""


class Limits(BaseModel):
    """What one sandbox may use. rlimits apply to every process in it; ``max_processes`` counts
    the processes of the sandbox's own uid (one uid per sandbox), so a fork bomb stops there.

    ``memory_bytes`` bounds the sandbox's total memory through a cgroup. Where no cgroup is
    writable (``cgroups="auto"``) only the per-process ``address_space_bytes`` applies.
    ``storage_bytes`` and ``max_inodes`` bound its disk as a whole (a filesystem of its own).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float | None = Field(600.0, gt=0)
    """Default wall-clock limit of one ``exec``; the whole process tree is killed at it."""
    cpu_seconds: int = Field(600, gt=0)
    """CPU seconds per process (RLIMIT_CPU)."""
    address_space_bytes: int = Field(8 * GiB, gt=0)
    """Virtual memory per process (RLIMIT_AS). The JVM needs at least 4 GiB."""
    max_processes: int = Field(512, gt=0)
    """Processes and threads of the sandbox's uid (RLIMIT_NPROC)."""
    max_file_bytes: int = Field(2 * GiB, gt=0)
    """Largest file a process may write (RLIMIT_FSIZE)."""
    max_open_files: int = Field(4096, gt=0)
    """Open files per process (RLIMIT_NOFILE)."""
    output_bytes: int = Field(1 * MiB, ge=1024)
    """Kept of stdout and of stderr, each; the rest is counted and dropped with a marker."""
    storage_bytes: int | None = Field(None, ge=8 * MiB, le=1 << 44)
    """Disk of the whole workspace: ``/app``, ``/tmp`` (and an overlay's writes) together, on a
    filesystem of exactly this size for the sandbox's life (sandbox/storage.py). ``None``: no
    bound but ``max_file_bytes``. Without root, each file is bounded by it instead (a warning)."""
    max_inodes: int | None = Field(None, ge=64, le=1 << 32)
    """Files, directories and links of that filesystem; ``None``: one per 8 KiB of storage."""
    storage_fs: Literal["auto", "ext4", "tmpfs"] = "auto"
    """``ext4``: a sparse image on a loop device (root); ``tmpfs``: in memory, counted against
    ``memory_bytes``; ``auto``: ext4 where loop devices work, else tmpfs."""
    memory_bytes: int | None = Field(None, gt=0)
    """Total memory of the sandbox (a cgroup); ``None`` for no total limit."""
    cgroups: Literal["auto", "off", "required"] = "auto"
    """``auto``: use a cgroup for ``memory_bytes`` when the host lets us, else warn once."""

    @model_validator(mode="after")
    def _inodes_need_storage(self) -> Limits:
        if self.max_inodes is not None and self.storage_bytes is None:
            raise ValueError(
                "max_inodes bounds the sandbox's own filesystem: set storage_bytes too"
            )
        return self

    def rlimits(self) -> dict[str, int]:
        """prlimit(1) option names and values."""
        return {
            "cpu": self.cpu_seconds,
            "as": self.address_space_bytes,
            "nproc": self.max_processes,
            "fsize": self.max_file_bytes,
            "nofile": self.max_open_files,
        }


@cache
def prlimit_binary() -> str | None:
    return shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin")


def rlimit_prefix(limits: Limits, *, nproc: bool = True) -> list[str]:
    """An argv prefix that sets the rlimits, then execs the rest (util-linux ``prlimit``).

    ``nproc=False`` leaves RLIMIT_NPROC alone: it counts every process of the uid, and without
    a uid of the sandbox's own that would be the user's whole session.
    """
    exe = prlimit_binary()
    if exe is None:
        raise ConfigError(
            "the 'prlimit' program (util-linux) is not on this host; sandboxes need it to set "
            "resource limits. Install util-linux (apt-get install util-linux)."
        )
    opts = [f"--{k}={v}" for k, v in limits.rlimits().items() if nproc or k != "nproc"]
    return [exe, *opts, "--"]


# --- cgroups ---------------------------------------------------------------------------------
_CG_ROOT_V1 = Path("/sys/fs/cgroup/memory")
_CG_ROOT_V2 = Path("/sys/fs/cgroup")


@cache
def _cgroup_parent() -> tuple[Path, int] | None:
    """A writable parent cgroup ``envlab`` (v1 memory controller, or v2), or None."""
    candidates: list[tuple[Path, int]] = []
    if (_CG_ROOT_V1 / "memory.limit_in_bytes").exists():
        candidates.append((_CG_ROOT_V1 / "envlab", 1))
    if (_CG_ROOT_V2 / "cgroup.controllers").exists():
        candidates.append((_CG_ROOT_V2 / "envlab", 2))
    for parent, version in candidates:
        try:
            parent.mkdir(exist_ok=True)
            if version == 2:
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
            # unique per call: sandboxes made at once in threads of one process probe together
            probe = parent / f"probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return parent, version
    return None


_warned = False


class Cgroup:
    """One cgroup per sandbox, for its total memory. Processes join it through ``attach()``."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @classmethod
    def create(cls, name: str, limits: Limits) -> Cgroup | None:
        global _warned
        if limits.memory_bytes is None or limits.cgroups == "off":
            return None
        found = _cgroup_parent()
        if found is None:
            if limits.cgroups == "required":
                raise ConfigError(
                    "Limits(cgroups='required') but no cgroup is writable on this host "
                    "(tried /sys/fs/cgroup/memory and /sys/fs/cgroup). Run as root with "
                    "cgroups mounted read-write, or use cgroups='auto' to rely on rlimits."
                )
            if not _warned:
                _warned = True
                log.warning(
                    "no writable cgroup: the sandbox memory limit %d bytes is not enforced as a "
                    "total; each process is still limited to %d bytes of address space",
                    limits.memory_bytes,
                    limits.address_space_bytes,
                )
            return None
        parent, version = found
        path = parent / name
        try:
            path.mkdir()
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            else:
                (path / "memory.max").write_text(str(limits.memory_bytes))
                (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(limits.max_processes))
        except OSError as e:
            with contextlib.suppress(OSError):
                path.rmdir()
            if limits.cgroups == "required":
                raise ConfigError(f"cannot set up cgroup {path}: {e}") from e
            log.warning("cannot set up cgroup %s (%s); relying on rlimits", path, e)
            return None
        return cls(path, version)

    def attach(self, pid: int) -> None:
        """Move process ``pid`` into this cgroup (its later children are born in it)."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> bool:
        """Remove the cgroup (and the cgroups made under it); False while processes remain."""
        try:
            for child in sorted(self.path.glob("*/"), reverse=True):
                if child.is_dir() and (child / "cgroup.procs").exists():
                    child.rmdir()
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True
