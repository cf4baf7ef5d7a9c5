"""Tamper evidence for Harbor's ``shared`` verifier mode: did the grade use the agent's files?

In the shared mode the tests run in the agent's own filesystem, so any program, library,
configuration file or cache they use may be one the agent wrote. Every file the agent created
or changed is in its overlay's upper layer; the kernel records each read of a file in its
access time (``atime``: a ``read``, an ``mmap`` of a library, an ``execve``, a link followed).
So, before test.sh runs, every regular file and link of the agent's layer gets ``atime = 0``
(and its inode and change time are recorded); after, a file whose ``atime`` moved was read,
and one whose change time moved was rewritten (by the agent's live processes, or to hide a
read: setting a time changes the change time, which no process can set). A file so *touched*
that the task does not expect the agent to change (``Expected``: what the oracle's own run of
``solve.sh`` changed) makes the grade ``grader_tainted``: reward 0, scored, the files named.

Why this mechanism (``bench/tamper.py`` measures it beside ``strace``): it costs one ``lstat``
and one ``utimensat`` per file of the agent's layer, before and after, and nothing while the
tests run; a tracer (``ptrace``, seccomp notification) stops every system call of the tests,
and ``fanotify`` needs a mark per mount and a reader in the host. It needs a filesystem that
records reads (``relatime`` or ``strictatime``, not ``noatime``): ``check_records_reads``
says so before any grade relies on it. It does not see a file whose mere existence (a
``stat``, no read) changes what the tests do.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from envlab.core.errors import InfraError


@dataclass
class Armed:
    """The agent's layer as it was when armed: path (relative) -> (inode, change time)."""

    root: Path
    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    special: set[str] = field(default_factory=set)
    """FIFOs and devices: a read of one leaves no time on the layer's inode (the overlay
    serves it), so one the task does not expect taints the grade whether or not it was read."""


@dataclass
class Expected:
    """What the task expects the agent to change: the files (and links) the oracle changed, by
    path; and ``volatile`` directories, under which two runs of the oracle wrote different names
    (a run id, a temporary name), whose whole subtree is expected. A directory the oracle merely
    created is no licence for any other file in it (a ``.pth`` beside the oracle's package would
    run in every python of the grade)."""

    files: set[str] = field(default_factory=set)
    volatile: set[str] = field(default_factory=set)

    def covers(self, rel: str) -> bool:
        if rel in self.files:
            return True
        parts = rel.split("/")
        return any("/".join(parts[:i]) in self.volatile for i in range(1, len(parts)))

    def to_json(self) -> dict[str, list[str]]:
        return {"files": sorted(self.files), "volatile": sorted(self.volatile)}

    @classmethod
    def from_json(cls, data: dict[str, list[str]]) -> Expected:
        return cls(set(data.get("files", [])), set(data.get("volatile", [])))

    def merged(self, other: Expected) -> Expected:
        """Both runs' files; where they differ, the deepest directory both runs wrote under
        becomes volatile."""
        ours, theirs = _dirs(self.files), _dirs(other.files)
        volatile = set(self.volatile | other.volatile)
        for f in self.files ^ other.files:
            parts = f.split("/")[:-1]
            while parts and not ("/".join(parts) in ours and "/".join(parts) in theirs):
                parts.pop()
            if len(parts) > 1 and parts[-1] not in NEVER_VOLATILE:
                volatile.add("/".join(parts))
        return Expected(self.files | other.files, volatile)


NEVER_VOLATILE = frozenset(
    {"site-packages", "dist-packages", "bin", "sbin", "lib", "lib64", "etc", "profile.d",
     "ld.so.conf.d", "tmp"}
)  # fmt: skip
"""Where a run's varying names never license others: what programs run or load from (a
``.pth`` in a site directory, a program on ``PATH``, the loader's configuration); nor a
top-level directory."""


def _dirs(files: set[str]) -> set[str]:
    out: set[str] = set()
    for f in files:
        parts = f.split("/")[:-1]
        out |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return out


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` but directories and whiteouts (files, links, FIFOs, sockets,
    devices), with its ``lstat`` (no recursion: a tree deeper than Python's recursion limit is
    walked too)."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(root / rel if rel else root))
        except OSError:
            continue
        for e in entries:
            sub = f"{rel}/{e.name}" if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(sub)
            elif not (stat.S_ISCHR(st.st_mode) and st.st_rdev == 0):  # not a whiteout
                out.append((sub, st))  # files, links, FIFOs (a .pth served live), sockets
    return out


def arm(layer: Path) -> Armed:
    """Set ``atime = 0`` on every file and link of ``layer`` and record each one's inode and
    change time (after that write). Nothing of the agent may run while this runs... except in
    the shared mode, where a process of the agent that touches a file now is caught as well."""
    armed = Armed(layer)
    for rel, st in _walk(layer):
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            armed.special.add(rel)
        path = layer / rel
        try:
            os.utime(path, ns=(0, st.st_mtime_ns), follow_symlinks=False)
            after = os.lstat(path)
        except OSError:
            continue
        armed.files[rel] = (after.st_ino, after.st_ctime_ns)
    return armed


def touched(armed: Armed) -> list[str]:
    """The files of the armed layer read (``atime`` moved), rewritten or replaced since."""
    found = []
    for rel, (ino, ctime) in armed.files.items():
        try:
            st = os.lstat(armed.root / rel)
        except OSError:  # removed while grading: it may have been read first (a payload that
            found.append(rel)  # deletes itself), so it counts as touched
            continue
        if st.st_atime_ns != 0 or st.st_ctime_ns != ctime or st.st_ino != ino:
            found.append(rel)
    return sorted(found)


def tainted(armed: Armed, expected: Expected) -> list[str]:
    """The touched files (and every FIFO or device, whenever it appeared: a live process of the
    agent may make one while the tests run) the task does not expect the agent to change, as
    ``/path``."""
    found = set(touched(armed)) | armed.special | _special(armed.root)
    return ["/" + rel for rel in sorted(found) if not expected.covers(rel)]


def _special(layer: Path) -> set[str]:
    return {
        rel
        for rel, st in _walk(layer)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
    }


def changed_by(layer: Path) -> Expected:
    """What a run changed, from its upper ``layer``: every file and link in it."""
    return Expected({rel for rel, _st in _walk(layer)})


def check_records_reads(scratch: Path) -> None:
    """``InfraError`` when the filesystem under ``scratch`` does not record reads (mounted
    ``noatime``): the shared mode's tamper evidence would see nothing there."""
    probe = scratch / f".envlab-atime-{os.getpid()}-{time.monotonic_ns()}"
    try:
        probe.write_bytes(b"x")
        st = os.lstat(probe)
        os.utime(probe, ns=(0, st.st_mtime_ns))
        with open(probe, "rb") as f:
            f.read()
        recorded = os.lstat(probe).st_atime_ns != 0
    finally:
        probe.unlink(missing_ok=True)
    if not recorded:
        raise InfraError(
            f"the filesystem under {scratch} does not record reads (mounted noatime?): the "
            "shared verifier mode's tamper evidence needs relatime or strictatime there"
        )
