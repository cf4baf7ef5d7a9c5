"""Tool calls as text: the Hermes format a server renders, and the formats small models emit.

A model without native tool calling sees its tools in the system prompt, Hermes-style
(``<tools>...</tools>``), and calls one by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. Small open models also answer with
a bare JSON object or a fenced ```json block; :func:`parse_tool_calls` reads all three.

A call whose JSON is broken is still a call: its ``arguments`` stay the raw text (a string), so
the environment answers with an error the model can read and the episode goes on.
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
_ARG_KEYS = ("arguments", "parameters", "args")


@dataclass(slots=True)
class TextToolCall:
    """One tool call read from text. ``arguments`` is the raw text when its JSON was broken."""

    name: str
    arguments: dict[str, Any] | str
    format: str
    """``hermes``, ``fenced`` or ``json``: where it was found."""
    raw: str = ""


@dataclass(slots=True)
class ParsedText:
    """A reply split into its tool calls and the text around them."""

    content: str
    calls: list[TextToolCall] = field(default_factory=list)


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """One call in the Hermes format, as the model is shown to write it."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            body = f'{{"name": {json.dumps(name)}, "arguments": {arguments}}}'
            return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
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


def _call_from_obj(obj: Any, fmt: str, raw: str) -> TextToolCall | None:
    """A call from a decoded JSON value, or None when it does not look like one."""
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        return _call_from_obj(obj["function"], fmt, raw)  # {"type": "function", "function": ..}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args: Any = {}
    for key in _ARG_KEYS:
        if key in obj:
            args = obj[key]
            break
    if not isinstance(args, dict | str):
        args = json.dumps(args)  # a list or a number: the environment says what is wrong
    return TextToolCall(obj["name"], args, fmt, raw)


def _calls_from_json_text(text: str, fmt: str, *, lenient: bool) -> list[TextToolCall] | None:
    """Calls in ``text`` (one object or a list of them); None when it is not a call at all.

    With ``lenient``, text that fails to decode but names a tool becomes one call whose
    arguments are the raw text.
    """
    body = text.strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        if not lenient:
            return None
        m = _NAME.search(body)
        if m is None:
            return [TextToolCall("", body, fmt, body)] if fmt == "hermes" and body else None
        return [TextToolCall(m.group(1), body, fmt, body)]
    items = value if isinstance(value, list) else [value]
    calls = [_call_from_obj(v, fmt, body) for v in items]
    found = [c for c in calls if c is not None]
    if not found:
        return None
    return found


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
    decoder = json.JSONDecoder()
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
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        call = _call_from_obj(value, "json", text[i:end])
        if call is not None and (
            any(k in value for k in _ARG_KEYS) or isinstance(value.get("function"), dict)
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
