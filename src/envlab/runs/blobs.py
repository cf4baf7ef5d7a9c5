"""Long strings of the messages, stored once per run as ``blobs/<sha256>``.

A reference is a string ``"\\x00envlab-blob:sha256:<hex>"``. Every string of a message that is
long, or that starts like a reference, is stored as a blob: a reference in a line is never text
the agent wrote, and reading returns exactly the messages that were recorded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from envlab.core import StoreError
from envlab.runs.errors import store_error

BLOBS_DIR = "blobs"
BLOB_MIN_CHARS = 16 * 1024
"""Strings of messages this long (or longer) are stored once, as blobs."""
REF = "\x00envlab-blob:sha256:"
REF_JSON = b"\\u0000envlab-blob:sha256:"
"""How a reference looks inside a JSON line."""


class Blobs:
    """The ``blobs/`` folder of a run directory."""

    def __init__(self, path: Path, *, min_chars: int = BLOB_MIN_CHARS) -> None:
        self.path = path
        self.min_chars = min_chars
        self._known: set[str] = set()

    def externalize(self, value: Any) -> Any:
        """``value`` with its long strings replaced by references to blobs (``value`` itself
        when nothing changed)."""
        if isinstance(value, str):
            if len(value) >= self.min_chars or value.startswith(REF):
                return REF + self.put(value.encode("utf-8", "surrogatepass"))
            return value
        if isinstance(value, dict):
            new = {k: self.externalize(v) for k, v in value.items()}
            return new if any(new[k] is not value[k] for k in value) else value
        if isinstance(value, list | tuple):
            items = [self.externalize(v) for v in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        return value

    def put(self, data: bytes) -> str:
        """Write ``blobs/<sha256>`` once (atomically: a temporary file, synced, renamed)."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.path / digest
        if digest in self._known or final.is_file():
            self._known.add(digest)
            return digest
        tmp = self.path / f".{digest}.{os.getpid()}.tmp"
        try:
            self.path.mkdir(exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise store_error(e, final, "write a message blob") from e
        self._known.add(digest)
        return digest

    def inflate(self, value: Any, cache: dict[str, str], where: str) -> Any:
        """``value`` with its references replaced by the blobs' text (read once per ``cache``)."""
        if isinstance(value, str):
            if not value.startswith(REF):
                return value
            digest = value[len(REF) :]
            if digest not in cache:
                cache[digest] = self.read(digest, where)
            return cache[digest]
        if isinstance(value, dict):
            return {k: self.inflate(v, cache, where) for k, v in value.items()}
        if isinstance(value, list):
            return [self.inflate(v, cache, where) for v in value]
        return value

    def read(self, digest: str, where: str) -> str:
        path = self.path / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"{where}: a message of this episode is stored in {path}, which is missing. "
                f"Copy a run directory whole (with its {BLOBS_DIR}/); or delete this line and "
                "run again with --resume to record the episode again."
            ) from None
        except OSError as e:
            raise store_error(e, path, "read") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreError(
                f"{where}: {path} does not hold what was recorded (its sha256 differs): the "
                "file was changed or damaged. Restore it, or delete this line and run again "
                "with --resume."
            )
        return data.decode("utf-8", "surrogatepass")

    def remove_stale(self) -> None:
        """Delete the temporary files of blob writers that were killed."""
        for stale in self.path.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
