"""Scrub a frozen workspace so that another sandbox sees what the agent's own sandbox saw.

A symlink is judged by where it led *inside the agent's sandbox*, where the workspace was
``/app``: ``/app/x`` is ``root/x``; a target elsewhere (``/tests/expected.json``, ``/dev/zero``,
``/proc/self/fd/1``, ``/tmp/...``) is outside the workspace and is removed, because the verifier's
sandbox would resolve it to something the agent never had (its tests, its stdout, a device that
never ends). The exception, unless ``keep_system=False``: a link into the read-only system
directories that every sandbox shares (``/usr``, ``/bin``, ``/lib``, the Python toolchain), e.g.
a venv's ``bin/python``, which resolves to the same file in both sandboxes. Links that dangle,
or end on a file that is removed here, are removed too; so are FIFOs, sockets and device nodes.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

APP = "/app"
_MAX_LINKS = 40  # as the kernel's MAXSYMLINKS
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _system_roots() -> tuple[str, ...]:
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return (*_SYSTEM, *sorted(prefixes))


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class _Outside(Exception):
    def __init__(self, where: str) -> None:
        self.where = where


class _Resolver:
    """Resolves in-sandbox paths against the host copy of ``/app``, one component at a time,
    with ``lstat``/``readlink`` only on host paths whose every parent is a real directory."""

    def __init__(self, root: Path, mount: str) -> None:
        self.root = str(root)
        self.mount = [p for p in mount.split("/") if p]

    def host(self, parts: list[str]) -> str | None:
        n = len(self.mount)
        if parts[:n] != self.mount:
            return None
        return os.path.join(self.root, *parts[n:])

    def resolve(self, parts: list[str], target: str) -> tuple[list[str], os.stat_result | None]:
        """Follow ``target`` (a link's text) from the directory ``parts``; return the final
        in-sandbox path and its ``lstat`` (None: missing). Raises ``_Outside``."""
        pending = target.split("/")
        cur = [] if target.startswith("/") else list(parts)
        hops = 0
        st: os.stat_result | None = None
        while pending:
            comp = pending.pop(0)
            if comp in ("", "."):
                continue
            if comp == "..":
                if cur:
                    cur.pop()
                continue
            cur.append(comp)
            if self.mount[: len(cur)] == cur:  # still above the workspace: /, /app
                st = None
                continue
            host = self.host(cur)
            if host is None:
                raise _Outside("/" + "/".join([*cur, *[p for p in pending if p]]))
            try:
                st = os.lstat(host)
            except OSError:
                return cur, None
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_LINKS:
                    return cur, None
                text = os.readlink(host)
                cur.pop()
                if text.startswith("/"):
                    cur = []
                pending = text.split("/") + pending
            elif pending and not stat.S_ISDIR(st.st_mode):
                return cur, None  # a component that is not a directory: ENOTDIR
        if cur == self.mount:  # the workspace itself
            return cur, os.lstat(self.root)
        if self.mount[: len(cur)] == cur:
            raise _Outside("/" + "/".join(cur))  # / or a parent of the workspace
        return cur, st


def _kind(mode: int) -> str | None:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return None


def _judge_link(
    resolver: _Resolver,
    parts: list[str],
    text: str,
    system: tuple[str, ...],
    forbidden: tuple[str, ...] | None = None,
) -> str | None:
    """Why the link must go (``outside``, ``dangling``), or None to keep it."""
    try:
        _, st = resolver.resolve(parts, text)
    except _Outside as out:
        if forbidden is not None:  # an image: outside the workspace is the pristine image
            return "outside" if _under(os.path.normpath(out.where), forbidden) else None
        if system and _under(os.path.normpath(out.where), system):
            real = os.path.realpath(out.where)
            if _under(real, system) and os.path.exists(real):
                return None
        return "outside"
    if st is None or _kind(st.st_mode) is not None:
        return "dangling"
    return None


def scrub_tree(
    root: Path,
    *,
    mount: str = APP,
    keep_system: bool = True,
    forbidden: tuple[str, ...] | None = None,
) -> list[dict[str, str]]:
    """Remove, in place, what must not reach another sandbox from the workspace ``root`` (seen
    at ``mount`` by the agent): links that dangle or lead outside it, FIFOs, sockets, device
    nodes. Returns one ``{"path", "kind", "target", "reason"}`` per removed entry (``path``
    relative to ``root``; ``target`` the link's text, else ""). Idempotent.

    ``forbidden``: ``root`` is a workspace carried into a fresh sandbox of the same image (an
    overlay layer): a link out of the workspace is kept (it resolves in the pristine image)
    unless it leads under one of these roots; overlay whiteouts (devices 0:0) are kept."""
    root = Path(root)
    resolver = _Resolver(root, mount)
    system = _system_roots() if keep_system else ()
    base = resolver.mount
    removed: list[dict[str, str]] = []
    stack: list[tuple[str, list[str]]] = [(str(root), base)]
    while stack:
        directory, parts = stack.pop()
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            rel = os.path.relpath(entry.path, root)
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, [*parts, entry.name]))
                continue
            if stat.S_ISLNK(st.st_mode):
                text = os.readlink(entry.path)
                reason = _judge_link(resolver, parts, text, system, forbidden)
                if reason is not None:
                    os.unlink(entry.path)
                    removed.append({"path": rel, "kind": "symlink", "target": text,
                                    "reason": reason})  # fmt: skip
                continue
            kind = _kind(st.st_mode)
            if forbidden is not None and stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                continue  # an overlay whiteout: a deletion the agent made
            if kind is not None:
                os.unlink(entry.path)
                removed.append({"path": rel, "kind": kind, "target": "", "reason": "special"})
    removed.sort(key=lambda r: r["path"])
    return removed
