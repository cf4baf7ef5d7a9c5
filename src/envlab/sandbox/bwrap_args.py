"""The ``bwrap`` command line of a sandbox: what is fixed for its life, and extra mounts."""

from __future__ import annotations

from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.base import APP, Mount
from envlab.sandbox.layout import HostLayout, bwrap_binary
from envlab.sandbox.limits import MiB

SHM_BYTES = 64 * MiB
"""``/dev/shm`` of one command (Docker's default size); its pages count as the sandbox's memory."""


def static_args(
    layout: HostLayout,
    *,
    app: Path,
    tmp: Path,
    overlay: tuple[Path, Path] | None,
    network: bool,
    rootless: bool,
    mounts: list[Mount],
) -> list[str]:
    """Everything but the per-command part. ``overlay`` is (upper, work) when ``/app`` is an
    overlay on ``app``."""
    a = [
        bwrap_binary(),
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
    ]
    if not network:
        a.append("--unshare-net")
    if rootless:
        a += ["--unshare-user", "--disable-userns", "--uid", "1000", "--gid", "1000"]
    # /app and /tmp first: a toolchain that lives below /tmp (a venv in a clone there) is
    # then bound on top of the sandbox's own /tmp instead of being hidden by it
    if overlay is not None:  # the frozen workspace below, the sandbox's own writes above
        a += ["--overlay-src", str(app), "--overlay", str(overlay[0]), str(overlay[1]), APP]
    else:
        a += ["--bind", str(app), APP]
    a += ["--bind", str(tmp), "/tmp"]
    for d in layout.dirs:
        if d not in (APP, "/tmp"):
            a += ["--perms", "0755", "--dir", d]
    for e in layout.entries:
        a += ["--symlink", e.source, e.target] if e.kind == "link" else [
            "--ro-bind", e.source, e.target,
        ]  # fmt: skip
    made = set(layout.dirs)
    a += ["--dev", "/dev", "--proc", "/proc"]
    # POSIX shared memory (multiprocessing's locks): a small tmpfs of each command's own
    a += ["--perms", "01777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    for m in mounts:
        a += mount_args(m, made)
    return a


def mount_args(m: Mount, made: set[str]) -> list[str]:
    """Bind ``m``, creating the directories above its target that are not made yet."""
    if not Path(m.source).exists():
        raise ConfigError(f"cannot mount {m.source} at {m.target}: no such host path")
    a: list[str] = []
    parts = Path(m.target).parts[1:-1]
    for i in range(len(parts)):
        d = "/" + "/".join(parts[: i + 1])
        if d not in made and d not in (APP, "/tmp"):
            made.add(d)
            a += ["--perms", "0755", "--dir", d]
    return [*a, "--bind" if m.writable else "--ro-bind", str(m.source), m.target]
