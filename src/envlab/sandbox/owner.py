"""Who owns what on the host: every envlab process that makes a sandbox registers as an owner.

An owner is alive exactly while it holds an ``flock`` on ``<lock root>/owners/<id>.lock`` (the
kernel drops it when the process dies, however it dies; a reused pid is not the same owner).
Everything a sandbox leaves on the host is named by its owner's id (its directory
``<state>/boxes/<id>/``, its cgroup ``envlab/<id>.<box>``), so ``envlab gc`` can tell what is
stale. The lock root is host-wide and does not depend on ``ENVLAB_SANDBOX_DIR``: uid leases are
kept there too (``/run/envlab`` for root).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from envlab.sandbox.workspace import private_dir, state_dir

OWNER_ID = re.compile(r"^o[0-9]+-[0-9a-f]{8}$")
_lock = threading.Lock()
_owner: Owner | None = None
_roots: set[Path] = set()


def lock_root() -> Path:
    """The host-wide directory of owner and uid locks (mode 0700, the current user's)."""
    if os.geteuid() == 0:
        root = Path("/run/envlab") if os.path.isdir("/run") else Path("/var/lib/envlab/run")
    elif os.environ.get("XDG_RUNTIME_DIR"):
        root = Path(os.environ["XDG_RUNTIME_DIR"]) / "envlab"
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        root = Path(cache) / "envlab" / "run"
    if root not in _roots:
        private_dir(root, "envlab's lock directory")
        for sub in ("owners", "uids"):
            (root / sub).mkdir(mode=0o700, exist_ok=True)
        _roots.add(root)
    return root


@dataclass
class Owner:
    id: str
    pid: int
    fd: int

    def boxes(self) -> Path:
        """This owner's directory in the current state directory (created 0700)."""
        d = state_dir() / "boxes" / self.id
        if not d.is_dir():
            d.mkdir(mode=0o700, exist_ok=True)
        return d


def scratch_dir(prefix: str) -> Path:
    """A new private directory (0700) for this process's temporary host files (a copy of a
    task's tests, the verifier's logs): below this process's owner directory, so that
    ``envlab gc`` removes it if the process dies before it does."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=current_owner().boxes()))


def current_owner() -> Owner:
    """This process's owner registration (made on first use; a forked child makes its own)."""
    global _owner
    with _lock:
        if _owner is None or _owner.pid != os.getpid():
            _owner = _register()
        return _owner


def _register() -> Owner:
    owners = lock_root() / "owners"
    oid = f"o{os.getpid()}-{secrets.token_hex(4)}"
    tmp = owners / f".{oid}.new"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # before it has its name: never seen unlocked
    record = {"pid": os.getpid(), "state_dir": str(state_dir()), "started": time.time()}
    os.write(fd, json.dumps(record).encode())
    os.rename(tmp, owners / f"{oid}.lock")
    return Owner(oid, os.getpid(), fd)


def owner_of(name: str) -> str | None:
    """The owner id a stale-able name starts with (``<id>`` or ``<id>.<box>``), if any."""
    head = name.split(".", 1)[0]
    return head if OWNER_ID.match(head) else None


def hold_if_dead(oid: str) -> int | None:
    """An fd holding the lock of owner ``oid`` when it is dead (the caller closes it, after
    cleaning up); None while it lives. An owner without a lock file is dead: -1."""
    path = lock_root() / "owners" / f"{oid}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def is_alive(oid: str) -> bool:
    if _owner is not None and oid == _owner.id and _owner.pid == os.getpid():
        return True
    fd = hold_if_dead(oid)
    if fd is None:
        return True
    if fd >= 0:
        os.close(fd)
    return False


def record_of(oid: str) -> dict[str, object]:
    """What a (dead) owner wrote in its lock file: pid, state_dir, started."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((lock_root() / "owners" / f"{oid}.lock").read_text())
        if isinstance(data, dict):
            return data
    return {}


def owner_ids() -> list[str]:
    """Every owner registered on this host, alive or not."""
    names = os.listdir(lock_root() / "owners")
    return sorted(n[: -len(".lock")] for n in names if n.endswith(".lock") and owner_of(n[:-5]))
