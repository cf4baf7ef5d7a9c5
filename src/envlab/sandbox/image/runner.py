"""The ``bwrap`` command line of a command that runs in an image.

The root is an overlay: the image's layers read-only below (``--overlay-src``, lowest first),
the command's writes in an upper directory of its own (or nowhere, ``--ro-overlay``). The
command runs as the image's root with Docker's default posture: the capabilities Docker leaves a
container (no ``CAP_SYS_ADMIN``: no mounts, no namespaces), envlab's seccomp filter, ``/proc``
with ``/proc/sys`` and the kernel's control files read-only or masked, no ``/sys``, its own
PID, IPC and UTS namespaces, a network namespace of its own (loopback only; with ``network``,
the outside through a user-space stack and its resolver: sandbox/network.py), an empty
environment plus what the image sets, and a cgroup of its own for memory and processes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.base import Mount
from envlab.sandbox.layout import bwrap_binary
from envlab.sandbox.network import PROXY_VARS, resolv_conf
from envlab.sandbox.workspace import state_dir

DOCKER_CAPS = (
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
)  # fmt: skip
"""What Docker leaves a container's root (``docker run`` without ``--privileged``)."""
READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq")
MASKED = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHM_BYTES = 64 << 20


HOST_CA = "/run/envlab/host-ca.crt"
_CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
            "NODE_EXTRA_CA_CERTS")  # fmt: skip


def host_network_trust() -> tuple[list[Mount], dict[str, str]]:
    """What a command with the network needs to reach the registries as the host does: the
    host's CA bundle (a TLS-intercepting proxy's CA is in it) and proxy settings."""
    env = {k: os.environ[k] for k in PROXY_VARS if k in os.environ}
    bundle = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    if not Path(bundle).is_file():
        return [], env
    env |= {k: HOST_CA for k in _CA_VARS}
    return [Mount(Path(bundle), HOST_CA)], env


def hosts_file() -> Path:
    """The ``/etc/hosts`` every command sees (Docker writes one per container)."""
    path = state_dir() / "image-hosts"
    if not path.exists():
        path.write_text("127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost\n")
        path.chmod(0o644)
    return path


def image_args(
    lowers: Sequence[Path],
    upper: tuple[Path, Path] | None,
    *,
    network: bool,
    mounts: Sequence[Mount] = (),
) -> list[str]:
    """``bwrap`` and everything up to the per-command part. ``upper`` is (upper, work) of the
    command's writes; ``None`` makes the root read-only."""
    if not lowers:
        raise ConfigError("an image needs at least its base root filesystem")
    a = [bwrap_binary(), "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net"]
    a += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    a += ["--hostname", "sandbox"]
    for layer in lowers:
        a += ["--overlay-src", str(layer)]
    if upper is None:
        a += ["--ro-overlay", "/"]
    else:
        a += ["--overlay", str(upper[0]), str(upper[1]), "/"]
    a += ["--proc", "/proc", "--dev", "/dev"]
    a += ["--perms", "01777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    for path in READ_ONLY:
        if Path(path).exists():
            a += ["--ro-bind", path, path]
    for path in MASKED:
        if Path(path).exists():
            a += ["--ro-bind", "/dev/null", path]
    a += ["--ro-bind", str(hosts_file()), "/etc/hosts"]
    if network:  # the network stack's resolver (the start gate attaches the stack)
        a += ["--ro-bind", str(resolv_conf()), "/etc/resolv.conf"]
    for m in mounts:
        if not Path(m.source).exists():
            raise ConfigError(f"cannot mount {m.source} at {m.target}: no such host path")
        a += ["--bind" if m.writable else "--ro-bind", str(m.source), m.target]
    a += ["--cap-drop", "ALL"]
    for cap in DOCKER_CAPS:
        a += ["--cap-add", cap]
    return a


def command_args(
    cwd: str,
    env: Mapping[str, str],
    *,
    status_fd: int,
    block_fd: int,
    seccomp_fd: int | None,
    user: str = "root",
) -> list[str]:
    """The per-command part up to ``--``; a ``user`` other than root runs through the image's
    ``setpriv`` (util-linux, in every Debian and Ubuntu base)."""
    a = ["--chdir", cwd, "--json-status-fd", str(status_fd), "--block-fd", str(block_fd)]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    for k, v in env.items():
        a += ["--setenv", k, v]
    a.append("--")
    if user not in ("root", "0", "0:0", "root:root"):
        name, _, group = user.partition(":")
        a += ["setpriv", f"--reuid={name}", f"--regid={group or name}", "--init-groups", "--"]
    return a
