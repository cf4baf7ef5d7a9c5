"""What the logs answer: every logged tool call, by tool name and canonical arguments.

A call is answered by the logs when some session made the same call (exact match on the name
and the canonical arguments: JSON with sorted keys). The task's own reference session answers
first, its ``k``-th identical call with its ``k``-th logged result (a read after a write sees
the state after it, as logged); else the first successful session that made it, else any. With
``match=fuzzy`` a call no session made is answered by the most similar logged call of the same
tool (similarity of the canonical arguments at least the threshold), and recorded as fuzzy.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from envlab.core import ToolCallError, ToolSpec
from envlab.envs.replay.format import LogSession

FUZZY_MAX_CHARS = 20_000
"""Arguments longer than this (canonical) are never matched fuzzily."""

Key = tuple[str, str]
"""A call: the tool's name and its canonical arguments."""


def canonical(arguments: dict[str, Any] | str | None) -> str:
    """Arguments as canonical JSON (sorted keys, no spaces); text that is not a JSON object
    stays the text it was (stripped), so it only matches itself."""
    value: Any = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments.strip() or "{}")
        except (json.JSONDecodeError, RecursionError):
            return arguments.strip()
    if value is None:
        value = {}
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:  # nested past the encoder: only the same text matches it
        return arguments.strip() if isinstance(arguments, str) else f"<too deep {id(value)}>"


def _keys(arguments: str) -> list[str]:
    """The top-level names of logged arguments; none for text that is not a JSON object (a
    malformed or deeply nested call logged from a run)."""
    try:
        parsed = json.loads(arguments) if arguments.startswith("{") else {}
    except (json.JSONDecodeError, RecursionError):
        return []
    return [str(k) for k in parsed] if isinstance(parsed, dict) else []


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One tool call of a session and what the tool answered."""

    name: str
    arguments: str
    """Canonical."""
    result: str
    is_error: bool
    call_id: str

    @property
    def key(self) -> Key:
        return (self.name, self.arguments)


def session_calls(session: LogSession) -> list[tuple[Key, LoggedCall | None]]:
    """Every tool call of the session in the order made, with what answered it (``None``: no
    tool message did); an id used again (a retry) pairs with the answer after it."""
    calls: list[tuple[Key, LoggedCall | None]] = []
    pending: dict[str, int] = {}
    for m in session.messages:
        for c in m.tool_calls or []:
            pending[c.id] = len(calls)
            calls.append(((c.function.name, canonical(c.function.arguments)), None))
        if m.role == "tool" and m.tool_call_id in pending:
            i = pending.pop(m.tool_call_id)
            (name, args), _ = calls[i]
            calls[i] = (
                (name, args),
                LoggedCall(name, args, m.text, bool(m.is_error), m.tool_call_id or ""),
            )
    return calls


def logged_calls(session: LogSession) -> list[LoggedCall]:
    """The session's tool calls that a tool message answered, in the order made."""
    return [c for _, c in session_calls(session) if c is not None]


@dataclass(frozen=True, slots=True)
class Answer:
    content: str
    is_error: bool
    match: str
    """``exact`` or ``fuzzy``."""
    source: str
    """The session whose logged result this is."""
    arguments: str
    """The canonical arguments of the logged call that answered."""
    similarity: float = 1.0


@dataclass(slots=True)
class Answers:
    """The index of every logged call across all sessions."""

    sessions: list[LogSession]
    _by_key: dict[Key, list[tuple[str, LoggedCall]]] = field(init=False, default_factory=dict)
    _by_name: dict[str, list[Key]] = field(init=False, default_factory=dict)
    _success: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        for s in self.sessions:
            if s.outcome.success:
                self._success.add(s.session_id)
            for c in logged_calls(s):
                if c.key not in self._by_key:
                    self._by_name.setdefault(c.name, []).append(c.key)
                self._by_key.setdefault(c.key, []).append((s.session_id, c))

    def __len__(self) -> int:
        return len(self._by_key)

    def lookup(
        self, key: Key, reference: str, seen: Counter[Key], *, fuzzy: float | None = None
    ) -> Answer | None:
        """The answer to ``key`` in an episode whose reference session is ``reference`` and
        which made ``seen[key]`` such calls before; ``fuzzy``: the similarity threshold of a
        fuzzy match (``None``: exact only). Counts the call in ``seen``."""
        match, similarity = "exact", 1.0
        if key not in self._by_key and fuzzy is not None:
            best = self._nearest(key, fuzzy)
            if best is not None:
                match, (key, similarity) = "fuzzy", best
        logged = self._by_key.get(key)
        if not logged:
            return None
        k = seen[key]
        seen[key] += 1
        own = [c for sid, c in logged if sid == reference]
        if own:
            source, call = reference, own[min(k, len(own) - 1)]
        else:
            source, call = next(((sid, c) for sid, c in logged if sid in self._success), logged[0])
        return Answer(call.result, call.is_error, match, source, call.arguments, similarity)

    def _nearest(self, key: Key, threshold: float) -> tuple[Key, float] | None:
        if len(key[1]) > FUZZY_MAX_CHARS:
            return None  # no logged call is that long; and the comparison is quadratic
        best: tuple[Key, float] | None = None
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(key[1])
        for other in self._by_name.get(key[0], []):
            matcher.set_seq1(other[1])
            if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
                continue  # upper bounds of the ratio, cheap
            ratio = matcher.ratio()
            if ratio >= threshold and (best is None or ratio > best[1]):
                best = (other, ratio)
        return best


class _NoModel(BaseModel):
    """Placeholder: a logged tool's arguments are checked by ``LoggedToolSpec``."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, typ: Any) -> bool:
    types = typ if isinstance(typ, list) else [typ]
    if not all(isinstance(t, str) and t in _JSON_TYPES for t in types):
        return True  # a type this check does not know: accepted
    for t in types:
        if isinstance(value, bool) and t in ("integer", "number"):
            continue
        if isinstance(value, _JSON_TYPES[t]):
            return True
    return False


@dataclass(frozen=True, slots=True)
class LoggedToolSpec(ToolSpec):
    """A tool known from the logs: its schema as logged (or derived from the logged calls);
    arguments checked for JSON, required keys, unknown keys and the top-level types."""

    def parse_arguments(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        arguments = self.decode_arguments(arguments)  # JSON, an object, not too deep
        problems = self._problems(arguments)
        if problems:
            raise ToolCallError(
                f"bad arguments for tool '{self.name}': {'; '.join(problems)}. "
                f"Expected {self.signature()}"
            )
        return dict(arguments)

    def _problems(self, arguments: dict[str, Any]) -> list[str]:
        props: dict[str, Any] = self.parameters.get("properties") or {}
        out = [
            f"'{k}': Field required"
            for k in self.parameters.get("required", [])
            if k not in arguments
        ]
        closed = props and self.parameters.get("additionalProperties") is not True
        for k, v in arguments.items():
            if k not in props:
                if closed:
                    out.append(f"'{k}': Extra inputs are not permitted")
            elif "type" in props[k] and not _type_ok(v, props[k]["type"]):
                out.append(f"'{k}': expected {props[k]['type']}, got {type(v).__name__}")
        return out


def tool_specs(sessions: list[LogSession], answers_attr: str) -> dict[str, LoggedToolSpec]:
    """Every tool of the logs: the first schema a session logs for it, else one derived from
    its logged calls (their argument names, none required); ``writes`` from any session's
    ``writes``. ``answers_attr``: the episode's method that answers every call."""
    writes = {w for s in sessions for w in s.writes}
    schemas: dict[str, dict[str, Any]] = {}
    seen_args: dict[str, dict[str, None]] = {}
    for s in sessions:
        for t in s.tools:
            schemas.setdefault(t["function"]["name"], t["function"])
        for c in logged_calls(s):
            names = seen_args.setdefault(c.name, {})
            names.update(dict.fromkeys(_keys(c.arguments)))
    specs: dict[str, LoggedToolSpec] = {}
    for name in [*schemas, *(n for n in seen_args if n not in schemas)]:
        fn = schemas.get(name)
        if fn is None:
            props = {k: {} for k in seen_args[name]}
            fn = {
                "name": name,
                "description": "",
                "parameters": {"type": "object", "properties": props, "required": []},
            }
        params = fn.get("parameters") or {"type": "object", "properties": {}, "required": []}
        specs[name] = LoggedToolSpec(
            name=name,
            description=fn.get("description") or "",
            parameters=params,
            model=_NoModel,
            attr=answers_attr,
            writes=name in writes,
        )
    return specs
