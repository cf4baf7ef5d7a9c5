"""The image store: base root filesystems and layers on disk, each under its content key.

``ENVLAB_CACHE_DIR/images/`` holds ``bases/<key>/rootfs`` (one per ``FROM`` family, built once
per machine and shared read-only by every task and episode) and ``layers/<key>/`` (one per
Dockerfile instruction: the files it changed, an overlay upper layer). An entry is written in a
temporary directory, then renamed into place, so a reader never sees half of one; a file lock
lets one process build a key while the others wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

META = "envlab-layer.json"


def images_root() -> Path:
    """``ENVLAB_CACHE_DIR`` (default ``~/.cache/envlab``) / ``images``."""
    base = os.environ.get("ENVLAB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "envlab"
    )
    root = Path(base) / "images"
    for sub in ("bases", "layers", "locks", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def content_key(*parts: Any) -> str:
    """A short stable hash of JSON-able ``parts``."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


@contextlib.contextmanager
def locked(key: str) -> Iterator[None]:
    """Hold the build lock of ``key`` (other processes wait; threads of one process too)."""
    path = images_root() / "locks" / f"{key}.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_async_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


@contextlib.asynccontextmanager
async def alocked(key: str) -> AsyncIterator[None]:
    """``locked`` for coroutines: one holder per key in this process (an asyncio lock), the
    file lock taken and released in a worker thread (never blocking the event loop)."""
    lock = _async_locks.get(key)
    if lock is None:
        lock = _async_locks[key] = asyncio.Lock()
    async with lock:
        cm = locked(key)
        await asyncio.to_thread(cm.__enter__)
        try:
            yield
        finally:
            cm.__exit__(None, None, None)


def scratch(prefix: str) -> Path:
    """A new directory next to the store (same filesystem: a rename commits it)."""
    path = images_root() / "tmp" / f"{prefix}-{uuid.uuid4().hex[:12]}"
    path.mkdir(mode=0o755)
    return path


def commit(tmp: Path, final: Path) -> Path:
    """Move a finished entry into place (atomic); an entry already there wins."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        remove_tree(tmp)
    return final


def remove_tree(path: Path) -> None:
    """Delete ``path`` even where a build left directories without write permission."""
    if not path.exists():
        return

    def onerror(func: Any, p: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o755)
            os.chmod(p, 0o755)
        with contextlib.suppress(OSError):
            func(p)

    shutil.rmtree(path, onerror=onerror)


class LayerMeta(BaseModel):
    """What an instruction did, beside the files it changed."""

    key: str
    instruction: str
    """``Dockerfile:LINE: TEXT`` of the instruction."""
    seconds: float = 0.0
    bytes: int = 0


class ImageConfig(BaseModel):
    """The state a Dockerfile leaves beside its files: what a container would start with."""

    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    shell: list[str] = Field(default_factory=lambda: ["/bin/sh", "-c"])
    expose: list[str] = Field(default_factory=list)
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None


class Image(BaseModel):
    """A built image: its base root filesystem and layers, lowest first, and its config."""

    ref: str
    """What the Dockerfile's final stage starts ``FROM``."""
    base: Path
    layers: list[Path] = Field(default_factory=list)
    config: ImageConfig = Field(default_factory=ImageConfig)
    notes: list[str] = Field(default_factory=list)
    """Where the image differs from what Docker would build (the base's family, ...)."""
    key: str = ""

    @property
    def lowers(self) -> list[Path]:
        """Every read-only layer, lowest first (for ``--overlay-src``)."""
        return [self.base, *self.layers]


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (not following links)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                total += st.st_blocks * 512
    return total


def touch(layers: list[Path]) -> None:
    """Mark layers as used now (``prune_layers`` keeps what was used recently)."""
    for layer in layers:
        meta = layer.parent / META
        with contextlib.suppress(OSError):
            os.utime(meta if meta.exists() else layer.parent)


def prune_layers(unused_for_s: float) -> int:
    """Delete the layers (and squashed stacks, verifier caches) no sandbox was made over for
    ``unused_for_s`` seconds: bytes freed. The bases stay."""
    import time

    root = images_root() / "layers"
    cutoff = time.time() - unused_for_s
    freed = 0
    for entry in list(root.iterdir()):
        try:
            used = (
                (entry / META).stat().st_mtime if (entry / META).exists() else entry.stat().st_mtime
            )
        except OSError:
            continue
        if used < cutoff:
            freed += tree_bytes(entry)
            remove_tree(entry)
    return freed
