"""What a probe agent has seen, and tool arguments filled from it.

A probe knows nothing of the domain: it reads the prompt, the system prompt, the tool schemas and
every tool result, and keeps the values an agent could send back: id-like tokens (``find_ids``),
numbers, quoted words (``'resolved'`` in a description), enum values and defaults. ``fill``
builds the arguments of a tool from them, one variant per index, so that a probe can call every
tool with values it found without knowing what the tool does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from envlab.core import ToolSpec
from envlab.vet.spam import _ID_NAME, FREE_TEXT, find_ids

_CODE = re.compile(r"(?<![\w-])[A-Za-z]+[-_#]?\d[\w-]*(?![\w-])")
"""Codes the spam probe's ids leave out: ``TK-4100``, ``R17``, ``order_12``."""
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_QUOTED = re.compile(
    r"(?<![\w])(?:'([^'\s][^'\n]{0,38}[^'\s]|[^'\s])'|\"([^\"\s][^\"\n]{0,38}[^\"\s]|[^\"\s])\""
    r"|`([^`\s][^`\n]{0,38}[^`\s]|[^`\s])`)(?![\w])"
)
FREE_TEXT_VALUE = "vet probe"
MAX_VALUES = 200
"""Values kept of each kind (the first ones seen)."""


def numbers_in(text: str) -> list[str]:
    return list(dict.fromkeys(_NUMBER.findall(text)))


def quoted_in(text: str) -> list[str]:
    return list(dict.fromkeys(next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)))


def _walk_schema(schema: Any) -> list[dict[str, Any]]:
    """Every sub-schema (object) of a JSON schema."""
    out: list[dict[str, Any]] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.append(node)
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return out


def schema_values(tools: list[ToolSpec]) -> list[str]:
    """Enum values, defaults and quoted words of the tools' schemas and descriptions."""
    values: list[str] = []
    for t in tools:
        values += quoted_in(t.description)
        for node in _walk_schema(t.parameters):
            values += [str(v) for v in node.get("enum", []) if v is not None]
            if "default" in node and isinstance(node["default"], str | int | float):
                values.append(str(node["default"]))
            if isinstance(node.get("description"), str):
                values += quoted_in(node["description"])
    return list(dict.fromkeys(v for v in values if v.strip()))


@dataclass(slots=True)
class Seen:
    """The values of one episode so far, in the order found, each once."""

    ids: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)

    def read(self, text: str) -> None:
        for kind, found in (
            (self.ids, find_ids(text) + _CODE.findall(text)),
            (self.numbers, numbers_in(text)),
            (self.words, quoted_in(text) + _json_strings(text)),
        ):
            for v in found:
                if v not in kind and len(kind) < MAX_VALUES:
                    kind.append(v)

    def read_tools(self, tools: list[ToolSpec]) -> None:
        for v in schema_values(tools):
            if v not in self.words and len(self.words) < MAX_VALUES:
                self.words.append(v)

    def strings(self, name: str) -> list[str]:
        """Candidates for a string parameter: ids first for an id-like name, else words."""
        if _ID_NAME.search(name.lower()):
            return self.ids + self.words + self.numbers
        return self.words + self.ids + self.numbers

    def candidates(self) -> list[str]:
        """Every value seen: ids, words, numbers."""
        return list(dict.fromkeys(self.words + self.ids + self.numbers))


def _json_strings(text: str) -> list[str]:
    """Short string values of a JSON tool result (names, statuses, cities)."""
    text = text.strip()
    if not text.startswith(("{", "[")):
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    out = [
        v
        for node in _walk_schema(data)
        for v in (node.values() if isinstance(node, dict) else node)
        if isinstance(v, str) and 0 < len(v) <= 40
    ]
    return list(dict.fromkeys(out))


def _options(schema: dict[str, Any]) -> dict[str, Any]:
    """The first non-null branch of an ``anyOf`` (an optional parameter's own type)."""
    for branch in schema.get("anyOf", []):
        if isinstance(branch, dict) and branch.get("type") != "null":
            return {**branch, **{k: v for k, v in schema.items() if k != "anyOf"}}
    return schema


def fill_value(name: str, schema: dict[str, Any], seen: Seen, i: int) -> Any:
    """The ``i``-th candidate value for parameter ``name`` (cycling through what was seen)."""
    schema = _options(schema)
    if schema.get("enum"):
        return schema["enum"][i % len(schema["enum"])]
    typ = schema.get("type")
    if typ in ("integer", "number"):
        nums = [float(n) for n in seen.numbers]
        if typ == "integer":
            nums = [n for n in nums if n.is_integer()]
        vals: list[Any] = [int(n) if n.is_integer() else n for n in nums] or [1]
        return vals[i % len(vals)]
    if typ == "boolean":
        return i % 2 == 0
    if typ == "array":
        item = fill_value(name, schema.get("items", {}), seen, i)
        return [item]
    if typ == "object":
        return fill(schema, seen, i)
    if name.lower() in FREE_TEXT and not _ID_NAME.search(name.lower()):
        return FREE_TEXT_VALUE
    strings = seen.strings(name) or ["1"]
    return strings[i % len(strings)]


def fill(parameters: dict[str, Any], seen: Seen, i: int = 0) -> dict[str, Any]:
    """Arguments for a tool's (or an object's) required properties: variant ``i``."""
    props: dict[str, Any] = parameters.get("properties", {})
    required = parameters.get("required", [])
    return {n: fill_value(n, props.get(n, {}), seen, i) for n in required if n in props}


def variants(parameters: dict[str, Any], seen: Seen) -> int:
    """How many distinct variants ``fill`` can make (the most candidates of one parameter)."""
    props: dict[str, Any] = parameters.get("properties", {})
    most = 1
    for n in parameters.get("required", []):
        s = _options(props.get(n, {}))
        if s.get("enum"):
            most = max(most, len(s["enum"]))
        elif s.get("type") in ("integer", "number"):
            most = max(most, len(seen.numbers))
        elif s.get("type") in (None, "string"):
            most = max(most, len(seen.strings(n)))
    return most
