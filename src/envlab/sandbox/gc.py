"""Remove what dead envlab processes left on the host: workspaces, mounted filesystems, loop
devices, cgroups, processes of sandbox uids no one leases, and their owner locks.

What belongs to whom is read off names (sandbox/owner.py): an owner is dead when no process
holds its lock, which stays true when its pid is reused. Run at the first sandbox of every
process (``sweep_once``) and by ``envlab gc`` (``collect``). A live owner's things are never
touched; neither is anything that is not named like an envlab owner's, unless ``legacy`` is
asked for: then also workspaces directly in ``<state>/boxes`` and empty cgroups under
``envlab/`` named as envlab did before owners (run it when no older envlab is running).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from envlab.sandbox.owner import hold_if_dead, lock_root, owner_ids, owner_of, record_of
from envlab.sandbox.storage import remove_deep, unmount
from envlab.sandbox.uids import UID_BASE, UID_SLOTS, kill_uid, try_lease
from envlab.sandbox.workspace import state_dir

log = logging.getLogger(__name__)

LEGACY_STATE = Path("/tmp/envlab-sandbox")
"""Where envlab kept its workspaces before the state directory had to be private."""
CGROUP_PARENTS = (Path("/sys/fs/cgroup/memory/envlab"), Path("/sys/fs/cgroup/envlab"))
LOOP_CLR_FD = 0x4C01
_swept = False
_sweep_lock = threading.Lock()
_held = 0
_held_lock = threading.Lock()


@dataclass
class Removed:
    kind: str
    """``mount``, ``loop``, ``cgroup``, ``workspace``, ``processes`` or ``owner``."""
    path: str
    owner: str | None
    bytes: int = 0
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class _Deaths:
    """Which owners are dead, holding each dead one's lock until ``close()``."""

    def __init__(self) -> None:
        self.fds: dict[str, int | None] = {}

    def dead(self, oid: str | None) -> bool:
        if oid is None:
            return False
        if oid not in self.fds:
            self.fds[oid] = hold_if_dead(oid)
        return self.fds[oid] is not None

    def registered_dead(self, oid: str | None) -> bool:
        """Dead, and registered in this lock root (its lock file exists): for what is
        host-wide (mounts, loop devices, cgroups), where another lock root's owners show too."""
        if not self.dead(oid):
            return False
        fd = self.fds[oid]  # type: ignore[index]
        return fd is not None and fd >= 0

    def close(self) -> None:
        for fd in self.fds.values():
            if fd is not None and fd >= 0:
                os.close(fd)


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def _mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [_unescape(line.split()[4]) for line in f]


def _box_owner(path: str) -> str | None:
    """The owner of a path below some ``.../boxes/<owner>/``."""
    parts = Path(path).parts
    for i, p in enumerate(parts[:-1]):
        if p == "boxes":
            return owner_of(parts[i + 1])
    return None


def _du(path: Path) -> int:
    """Bytes under ``path``, walked without recursion (a tree deeper than Python's recursion
    limit, which a sandboxed program can leave, is measured too)."""
    total, todo = 0, [str(path)]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
    return total


def _gc_mounts(deaths: _Deaths, dry: bool, states: set[Path]) -> list[Removed]:
    out = []
    ours = tuple(str(s) + "/" for s in states)
    for mp in sorted(_mounts(), key=len, reverse=True):  # deepest first
        oid = _box_owner(mp)
        mine = deaths.registered_dead(oid) or (mp.startswith(ours) and deaths.dead(oid))
        if mine and (dry or unmount(mp)):
            out.append(Removed("mount", mp, oid))
    return out


def _gc_loops(deaths: _Deaths, dry: bool) -> list[Removed]:
    out = []
    for dev in sorted(Path("/sys/block").glob("loop*")):
        try:
            backing = (dev / "loop" / "backing_file").read_text().strip()
        except OSError:
            continue
        backing = backing.removesuffix(" (deleted)")
        oid = _box_owner(backing)
        if not deaths.registered_dead(oid):
            continue
        if not dry:
            try:
                fd = os.open(f"/dev/{dev.name}", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    fcntl.ioctl(fd, LOOP_CLR_FD)
                finally:
                    os.close(fd)
            except OSError as e:
                log.warning("cannot detach /dev/%s (%s): %s", dev.name, backing, e)
                continue
        out.append(Removed("loop", f"/dev/{dev.name}", oid, detail=backing))
    return out


def _empty_cgroup(path: Path, deadline_s: float = 5.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _gc_cgroups(deaths: _Deaths, dry: bool, legacy: bool) -> list[Removed]:
    out = []
    for parent in CGROUP_PARENTS:
        if not parent.is_dir():
            continue
        for cg in sorted(p for p in parent.iterdir() if p.is_dir()):
            oid = owner_of(cg.name)
            if (oid is None and not legacy) or (
                oid is not None and not deaths.registered_dead(oid)
            ):
                continue
            if dry:
                out.append(Removed("cgroup", str(cg), oid))
                continue
            if oid is not None:  # a dead owner's: kill what is left in it
                _empty_cgroup(cg)
            try:
                cg.rmdir()
            except OSError:
                continue  # a legacy cgroup with processes in it: not ours to judge
            out.append(Removed("cgroup", str(cg), oid))
    return out


def _gc_workspaces(deaths: _Deaths, dry: bool, states: set[Path], legacy: bool) -> list[Removed]:
    out = []
    mounted = _mounts()
    for state in sorted(states):
        boxes = state / "boxes"
        if not boxes.is_dir():
            continue
        for entry in sorted(boxes.iterdir()):
            oid = owner_of(entry.name)
            if (oid is None and not legacy) or (oid is not None and not deaths.dead(oid)):
                continue
            prefix = str(entry) + "/"
            if not dry and any(m.startswith(prefix) for m in mounted):
                log.warning("%s still has a mounted filesystem; leaving it", entry)
                continue
            size = _du(entry) if entry.is_dir() and not entry.is_symlink() else 0
            if not dry:
                if entry.is_dir() and not entry.is_symlink():
                    remove_deep(entry)
                else:
                    entry.unlink(missing_ok=True)
            out.append(Removed("workspace", str(entry), oid, bytes=size))
    return out


def _gc_uids(dry: bool) -> list[Removed]:
    """Processes of sandbox uids that nobody leases (their sandbox's owner died)."""
    if os.geteuid() != 0:
        return []
    uids: set[int] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                uid = os.stat(f"/proc/{name}").st_uid
                if UID_BASE <= uid < UID_BASE + UID_SLOTS:
                    uids.add(uid)
    out = []
    for uid in sorted(uids):
        lease = try_lease(uid)
        if lease is None:
            continue
        try:
            n = 0 if dry else kill_uid(uid)
        finally:
            lease.release()
        out.append(Removed("processes", f"uid {uid}", None, detail=f"{n} killed"))
    return out


@contextlib.contextmanager
def exclusive(wait_s: float | None = None) -> Iterator[bool]:
    """Hold the host's gc lock (one collection at a time: another would hold a dead owner's
    lock and so make it look alive). Yields False when it could not be had in ``wait_s``
    seconds. Inside it, this process's own collections do not wait for it."""
    global _held
    with _held_lock:
        fd = None if _held else _take_gc_lock(wait_s)
        got = bool(_held) or fd is not None
        if got:
            _held += 1
    if not got:
        yield False
        return
    try:
        yield True
    finally:
        with _held_lock:
            _held -= 1
            if fd is not None:
                os.close(fd)


def _take_gc_lock(wait_s: float | None) -> int | None:
    fd = os.open(lock_root() / "gc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    end = time.monotonic() + (wait_s if wait_s is not None else float("inf"))
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > end:
                os.close(fd)
                return None
            time.sleep(0.02)


def collect(
    *, dry_run: bool = False, legacy: bool = False, wait_s: float | None = None
) -> list[Removed]:
    """Remove (or with ``dry_run`` only list) everything of dead owners; return what.
    ``legacy`` also takes what envlab left before it named things by owner. Waits at most
    ``wait_s`` seconds for another collection to end, else returns nothing."""
    with exclusive(wait_s) as got:
        return _collect(dry_run, legacy) if got else []


def _collect(dry_run: bool, legacy: bool) -> list[Removed]:
    deaths = _Deaths()
    try:
        oids = owner_ids()
        states = {state_dir()}
        if legacy and LEGACY_STATE.is_dir() and LEGACY_STATE.stat().st_uid == os.geteuid():
            states.add(LEGACY_STATE)
        for oid in oids:
            if deaths.dead(oid):
                recorded = record_of(oid).get("state_dir")
                if isinstance(recorded, str) and os.path.isdir(recorded):
                    states.add(Path(recorded))
        removed: list[Removed] = []
        if os.geteuid() == 0:  # only root mounts, attaches loop devices, makes cgroups
            removed += _gc_mounts(deaths, dry_run, states) + _gc_loops(deaths, dry_run)
            removed += _gc_cgroups(deaths, dry_run, legacy)
        removed += _gc_workspaces(deaths, dry_run, states, legacy)
        if legacy:  # a sandbox uid nobody leases may still be an older envlab's
            removed += _gc_uids(dry_run)
        for oid in oids:
            if deaths.dead(oid):
                if not dry_run:
                    (lock_root() / "owners" / f"{oid}.lock").unlink(missing_ok=True)
                removed.append(Removed("owner", str(lock_root() / "owners" / oid), oid))
        return removed
    finally:
        deaths.close()


def sweep_once() -> None:
    """Clean up after dead owners, once per process (the first sandbox calls it)."""
    global _swept
    if _swept:
        return
    with _sweep_lock:
        if _swept:
            return
        _swept = True
        try:
            removed = collect(wait_s=30)  # one stuck longer is doing it for us
        except Exception as e:  # cleaning up must never stop a sandbox from starting
            log.warning("could not clean up after dead envlab processes: %s", e)
            return
        stale = [r for r in removed if r.kind != "owner"]
        if stale:
            freed = sum(r.bytes for r in stale)
            log.info("removed %d stale sandbox resources (%d bytes)", len(stale), freed)
