"""Tool calls as text: the Hermes format a server renders, and the formats small models emit.

A model without native tool calling sees its tools in the system prompt, Hermes-style
(``<tools>...</tools>``), and calls one by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. Small open models also answer with
a bare JSON object or a fenced ```json block; :func:`parse_tool_calls` reads all three.

A call whose JSON is broken is still a call: its ``arguments`` are the raw text, so the
environment answers with an error the model can read and the episode goes on.

Arguments are never decoded for the caller: ``TextToolCall.arguments`` is the JSON text of the
arguments exactly as the model wrote it (the substring of its reply), and the environment
decodes it, once (``ToolSpec.parse_arguments``). The parser reads the call's JSON only to find
where each part begins and ends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCED = re.compile(r"```(?:json|JSON|tool_call)?[ \t]*\n(.*?)```", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"\\]{1,200})"')
_WS = re.compile(r"[ \t\n\r]*")
_ARG_KEYS = ("arguments", "parameters", "args")
_DECODER = json.JSONDecoder()
_UNREADABLE = (json.JSONDecodeError, RecursionError)
"""What reading a call's JSON may raise: broken JSON, or JSON nested past the decoder's depth
(a reply nested 100,000 deep), which is read as broken JSON too."""

Members = dict[str, tuple[Any, str]]
"""A JSON object's members: key -> (decoded value, the value's text as written)."""


@dataclass(slots=True)
class TextToolCall:
    """One tool call read from text.

    ``arguments`` is the arguments' JSON text as the model wrote it (or, when the call's JSON
    is broken, the raw text of the whole call); a JSON string value (the OpenAI shape,
    ``"arguments": "{...}"``) is its text.
    """

    name: str
    arguments: str
    format: str
    """``hermes``, ``fenced`` or ``json``: where it was found."""
    raw: str = ""


@dataclass(slots=True)
class ParsedText:
    """A reply split into its tool calls and the text around them."""

    content: str
    calls: list[TextToolCall] = field(default_factory=list)


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """One call in the Hermes format, as the model is shown to write it; arguments given as
    text are written as they are (a model's own call renders back as it wrote it)."""
    if isinstance(arguments, str):
        args = arguments.strip() or "{}"
    else:
        args = json.dumps(arguments, ensure_ascii=False)
    body = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}'
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _example_value(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    return {"integer": 2, "number": 2, "string": "text", "boolean": True, "array": []}.get(
        schema.get("type", ""), "value"
    )


def example_call(tools: list[dict[str, Any]]) -> str | None:
    """A well-formed call of the first tool, with placeholder arguments, to show the format."""
    if not tools:
        return None
    fn = tools[0].get("function", tools[0])
    props = (fn.get("parameters") or {}).get("properties", {})
    return render_tool_call(
        str(fn.get("name", "tool")), {k: _example_value(v) for k, v in props.items()}
    )


def render_tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The tools block appended to the system prompt (the Hermes/Qwen convention)."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    text = (
        "# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    example = example_call(tools)
    if example:
        text += f"\n\nFor example:\n{example}"
    return text


def render_tool_response(content: str) -> str:
    return f"{TOOL_RESPONSE_OPEN}\n{content}\n{TOOL_RESPONSE_CLOSE}"


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _object_at(text: str, i: int) -> tuple[Members, int]:
    """The JSON object at ``text[i]``: its members and where it ends (``JSONDecodeError`` if
    it is not one)."""
    if not text.startswith("{", i):
        raise json.JSONDecodeError("Expecting '{'", text, i)
    members: Members = {}
    i = _skip(text, i + 1)
    if text.startswith("}", i):
        return members, i + 1
    while True:
        if not text.startswith('"', i):
            raise json.JSONDecodeError("Expecting property name", text, i)
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if not text.startswith(":", i):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        start = _skip(text, i + 1)
        value, i = _DECODER.raw_decode(text, start)
        members[key] = (value, text[start:i])
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif text.startswith("}", i):
            return members, i + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)


def _call_from_members(members: Members, fmt: str, raw: str) -> TextToolCall | None:
    """A call from an object's members, or None when it does not look like one."""
    fn = members.get("function")
    if fn is not None and isinstance(fn[0], dict):  # {"type": "function", "function": {..}}
        inner, _ = _object_at(fn[1], 0)
        return _call_from_members(inner, fmt, raw)
    name = members.get("name")
    if name is None or not isinstance(name[0], str):
        return None
    args = "{}"
    for key in _ARG_KEYS:
        if key in members:
            value, text = members[key]
            args = value if isinstance(value, str) else text
            break
    return TextToolCall(name[0], args, fmt, raw)


def _element_at(text: str, i: int, fmt: str) -> tuple[TextToolCall | None, int]:
    """The call at ``text[i]`` (None for a value that is not one) and where the value ends."""
    if text.startswith("{", i):
        members, end = _object_at(text, i)
        return _call_from_members(members, fmt, text[i:end]), end
    _, end = _DECODER.raw_decode(text, i)
    return None, end


def _calls_at(text: str, i: int, fmt: str) -> tuple[list[TextToolCall | None], int]:
    """The call (an object) or calls (a list of them) at ``text[i]``, and where it ends."""
    if not text.startswith("[", i):
        call, end = _element_at(text, i, fmt)
        return [call], end
    calls: list[TextToolCall | None] = []
    i = _skip(text, i + 1)
    if text.startswith("]", i):
        return calls, i + 1
    while True:
        call, i = _element_at(text, i, fmt)
        calls.append(call)
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
        elif text.startswith("]", i):
            return calls, i + 1
        else:
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)


def _calls_from_json_text(text: str, fmt: str, *, lenient: bool) -> list[TextToolCall] | None:
    """Calls in ``text`` (one object or a list of them); None when it is not a call at all.

    With ``lenient``, text that fails to decode but names a tool becomes one call whose
    arguments are the raw text.
    """
    body = text.strip()
    try:
        calls, end = _calls_at(body, 0, fmt)
        if end != len(body):
            raise json.JSONDecodeError("Extra data", body, end)
    except _UNREADABLE:
        if not lenient:
            return None
        m = _NAME.search(body)
        if m is None:
            return [TextToolCall("", body, fmt, body)] if fmt == "hermes" and body else None
        return [TextToolCall(m.group(1), body, fmt, body)]
    found = [c for c in calls if c is not None]
    return found or None


def parse_hermes(text: str, *, lenient: bool = True) -> ParsedText:
    """``<tool_call>...</tool_call>`` blocks (an unclosed last block counts).

    Strict mode (``lenient=False``, what a server does) keeps only blocks whose JSON decodes;
    the text is then returned unchanged when any block is broken, so nothing is lost.
    """
    if TOOL_CALL_OPEN not in text:
        return ParsedText(text)
    calls: list[TextToolCall] = []
    for m in _HERMES.finditer(text):
        found = _calls_from_json_text(m.group(1), "hermes", lenient=lenient)
        if found is None:
            if not lenient:
                return ParsedText(text)
            continue
        calls.extend(found)
    content = _HERMES.sub("", text).strip()
    return ParsedText(content, calls)


def _parse_fenced(text: str) -> ParsedText | None:
    calls: list[TextToolCall] = []
    spans: list[tuple[int, int]] = []
    for m in _FENCED.finditer(text):
        body = m.group(1)
        if '"name"' not in body:
            continue
        found = _calls_from_json_text(body, "fenced", lenient=True)
        if found:
            calls.extend(found)
            spans.append(m.span())
    if not calls:
        return None
    content = text
    for start, end in reversed(spans):
        content = content[:start] + content[end:]
    return ParsedText(content.strip(), calls)


def _parse_bare(text: str) -> ParsedText | None:
    """A JSON object (or list of them) with a ``name``, alone or inside prose."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        found = _calls_from_json_text(stripped, "json", lenient=False)
        if found:
            return ParsedText("", found)
    calls: list[TextToolCall] = []
    kept: list[str] = []
    pos = 0
    i = text.find("{")
    while i != -1:
        try:
            members, end = _object_at(text, i)
        except _UNREADABLE:
            i = text.find("{", i + 1)
            continue
        call = _call_from_members(members, "json", text[i:end])
        function = members.get("function", (None, ""))[0]
        if call is not None and (
            any(k in members for k in _ARG_KEYS) or isinstance(function, dict)
        ):
            calls.append(call)
            kept.append(text[pos:i])
            pos = end
        i = text.find("{", end)
    if calls:
        kept.append(text[pos:])
        return ParsedText("".join(kept).strip(), calls)
    name = _NAME.search(stripped) if stripped.startswith("{") else None
    if name is not None:  # an object that names a tool but failed to decode
        return ParsedText("", [TextToolCall(name.group(1), stripped, "json", stripped)])
    return None


def parse_tool_calls(text: str) -> ParsedText:
    """Tool calls in a model's text, tried in order: Hermes tags, fenced JSON, bare JSON.

    Text with no call comes back whole, with no calls: that is a final answer.
    """
    if TOOL_CALL_OPEN in text:
        return parse_hermes(text, lenient=True)
    return _parse_fenced(text) or _parse_bare(text) or ParsedText(text)
