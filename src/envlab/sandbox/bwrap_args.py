"""The ``bwrap`` command line of a sandbox: what is fixed for its life, and extra mounts."""

from __future__ import annotations

import os
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.base import APP, Mount
from envlab.sandbox.layout import HostLayout, bwrap_binary
from envlab.sandbox.limits import MiB
from envlab.sandbox.network import resolv_conf

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
    overlay on ``app``. The network namespace is always the command's own: with ``network``,
    the start gate attaches a network stack to it (sandbox/network.py) and its resolver is
    the stack's."""
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
        "--unshare-net",
    ]
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
    if network:
        a += mount_args(Mount(resolv_conf(), _resolv_target(layout)), made)
    a += ["--dev", "/dev", "--proc", "/proc"]
    # POSIX shared memory (multiprocessing's locks): a small tmpfs of each command's own
    a += ["--perms", "01777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    for m in mounts:
        a += mount_args(m, made)
    return a


def _resolv_target(layout: HostLayout) -> str:
    """Where the sandbox's ``/etc/resolv.conf`` leads: a link in the staged ``/etc`` (to
    systemd-resolved's file, say) is followed, else a bind on it would fail."""
    for e in layout.entries:
        if e.target == "/etc" and e.kind == "ro" and os.path.islink(f"{e.source}/resolv.conf"):
            return os.path.normpath(os.path.join("/etc", os.readlink(f"{e.source}/resolv.conf")))
    return "/etc/resolv.conf"


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
