"""What a remote server's frames may store in one trajectory.

A server decides how much it sends: a 30 MiB ``details`` map in its graded frame was stored
whole in every trajectory. Everything of a server's frames that envlab keeps beside the
conversation (the reset frame in ``state()``, each step's ``info``, the grade's ``details``) is
charged to one budget per episode, ``RemoteConfig.max_stored_bytes``; what does not fit is
replaced by a note saying what was cut and why. The reward and its components are never cut
(numbers, validated on the wire).
"""

from __future__ import annotations

import json
from typing import Any

STORED_BYTES = 1 << 20
"""The default budget: 1 MiB per trajectory."""


class FrameBudget:
    """The bytes left for one episode's stored frame data, and the notes of what was cut."""

    __slots__ = ("left", "limit", "notes")

    def __init__(self, limit: int = STORED_BYTES) -> None:
        self.limit = self.left = limit
        self.notes: list[str] = []

    def keep(self, value: dict[str, Any], what: str) -> dict[str, Any]:
        """``value`` when it fits in what is left (then charged), else ``{"cut": note}``."""
        size = _size(value)
        if size <= self.left:
            self.left -= size
            return value
        note = (
            f"{what} cut: the server sent {size} bytes, past what a remote server's frames may "
            f"store per trajectory ({self.limit} bytes in all, {self.left} left; "
            "RemoteConfig.max_stored_bytes)"
        )
        self.notes.append(note)
        return {"cut": note}


def _size(value: Any) -> int:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    except (ValueError, RecursionError):
        return 1 << 62  # not storable as JSON at all: never fits
    return len(text.encode("utf-8", "replace"))
