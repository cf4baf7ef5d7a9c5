"""Text that no encoder can write: lone surrogates (``"\\ud800"``), which JSON can spell as an
escape and Python decodes, but UTF-8, SQLite, orjson and the trajectory file all refuse.

What an agent sends is checked (``check_text``: its malformed action, refused in its own
phase); what the machinery writes is made writable (``valid_text``: U+FFFD in their place)."""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64


def check_text(value: Any, where: str, depth: int = 0) -> None:
    """``ValueError`` naming ``where`` when a string in ``value`` (a str, or dicts and lists of
    them, keys included) is not valid Unicode."""
    if type(value) is str:
        if value.isascii():
            return
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"{where} holds text that is not valid Unicode (a lone surrogate, "
                f"{value[e.start]!r} at position {e.start}): send valid UTF-8 text"
            ) from None
    elif depth < MAX_DEPTH and type(value) is dict:
        for k, v in value.items():
            check_text(k, f"{where} (a key)", depth + 1)
            check_text(v, f"{where}[{k!r}]", depth + 1)
    elif depth < MAX_DEPTH and type(value) is list:
        for i, v in enumerate(value):
            check_text(v, f"{where}[{i}]", depth + 1)


def valid_text(value: Any) -> Any:
    """``value`` (plain JSON data) with every lone surrogate in its strings replaced by U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [valid_text(v) for v in value]
    return value


def headline(message: str, limit: int = 300) -> str:
    """One line that says why: a message's first line and, when it quotes an output tail
    (``... Output tail:`` then the output), the tail's last non-empty line, which is where
    the cause usually is (``pytest: command not found``)."""
    head, sep, tail = message.strip().partition("Output tail:")
    first = head.strip().splitlines()[0] if head.strip() else ""
    last = next((x.strip() for x in reversed(tail.splitlines()) if x.strip()), "")
    if not sep:
        rest = [x.strip() for x in message.strip().splitlines()[1:] if x.strip()]
        last = rest[-1] if rest else ""
    line = f"{first} … {last}" if last else first
    return line if len(line) <= limit else line[: limit - 3] + "..."
