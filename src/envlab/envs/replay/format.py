"""The JSONL log format: one logged session per line (docs/logs.md).

A session is the conversation of one user with an agent, as OpenAI chat messages with tool
calls and tool results, the tools offered (OpenAI function schemas), which of them write, the
outcome, and optionally the user's goal in words and the session's side effects. ``read_logs``
checks every line and names the line and the field of the first problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envlab.core import ConfigError

FORMAT_VERSION = 1


class LogFormatError(ConfigError):
    """A log file that does not follow the format: the message names the line and the field."""


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    arguments: str = "{}"
    """The arguments as the model wrote them: a JSON object, as text (OpenAI's format)."""


class LoggedToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class LogMessage(BaseModel):
    """One OpenAI chat message: ``system``, ``user``, ``assistant`` (text and/or ``tool_calls``)
    or ``tool`` (the result of the call ``tool_call_id``)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    """Text, or OpenAI's content parts (``[{"type": "text", "text": ...}, ...]``)."""
    tool_calls: list[LoggedToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool | None = None
    """envlab's extension on a ``tool`` message: the tool refused the call (an error result)."""

    @model_validator(mode="after")
    def _shape(self) -> LogMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only an assistant message has tool_calls, not a {self.role} one")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.role == "tool" and self.content is None:
            raise ValueError("a tool message needs its content (the tool's result, as text)")
        return self

    @property
    def text(self) -> str:
        """The content as text (the text parts joined; other parts, e.g. images, left out)."""
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


def _parameters_problem(params: Any) -> str | None:
    """What is wrong with a tool's ``parameters`` (a JSON schema of an object), if anything."""
    if not isinstance(params, dict):
        return "must be a JSON schema object"
    props, required = params.get("properties", {}), params.get("required", [])
    if not isinstance(props, dict) or not all(isinstance(v, dict) for v in props.values()):
        return "properties must map each argument's name to its schema"
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "required must be a list of argument names"
    return None


class Outcome(BaseModel):
    model_config = ConfigDict(extra="allow")

    success: bool
    """The session did what the user wanted: a successful session is a task's reference."""
    reward: float | None = None


class LogSession(BaseModel):
    """One line of a log file."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = Field(min_length=1)
    messages: list[LogMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The tools offered, as OpenAI function schemas (``{"type": "function", "function":
    {"name", "description", "parameters"}}``); optional (then derived from the calls)."""
    writes: list[str] = Field(default_factory=list)
    """The names of the tools that change state (the others only read)."""
    outcome: Outcome
    goal: str | None = None
    """The user's goal in words (the model-backed user plays it); else the first user turn."""
    task: str | None = None
    """Sessions with the same ``task`` are attempts at the same goal; default the session id."""
    split: str = "test"
    side_effects: list[dict[str, Any]] = Field(default_factory=list)
    """What the session changed, as the logging system records it (kept, not graded)."""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, t in enumerate(tools):
            fn = t.get("function")
            if t.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
                raise ValueError(
                    f"tools[{i}] is not an OpenAI function schema: expected "
                    '{"type": "function", "function": {"name": ..., "parameters": {...}}}'
                )
            problem = _parameters_problem(fn.get("parameters", {}))
            if problem:
                raise ValueError(f"tools[{i}].function.parameters: {problem}")
        return tools

    @model_validator(mode="after")
    def _calls_answered_in_order(self) -> LogSession:
        asked: set[str] = set()
        pending: set[str] = set()  # asked, not answered yet
        for i, m in enumerate(self.messages):
            for c in m.tool_calls or []:
                if c.id in pending:
                    raise ValueError(
                        f"messages[{i}] makes tool call {c.id!r} while an earlier call with "
                        "that id is unanswered: which one a result answers would be a guess; "
                        "give each call its own id"
                    )
                asked.add(c.id)
                pending.add(c.id)
            if m.role == "tool" and m.tool_call_id not in asked:
                raise ValueError(
                    f"messages[{i}] answers tool call {m.tool_call_id!r}, which no earlier "
                    "assistant message made"
                )
            if m.role == "tool":
                pending.discard(m.tool_call_id or "")
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("messages hold no user message: a session starts with the user")
        return self

    @property
    def task_key(self) -> str:
        return self.task or self.session_id

    def user_turns(self) -> list[str]:
        return [m.text for m in self.messages if m.role == "user"]

    def opening(self) -> str:
        return self.user_turns()[0]

    def system(self) -> str | None:
        return next((m.text for m in self.messages if m.role == "system"), None)


def _where(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(the line)"
    msg = err["msg"].removeprefix("Value error, ")
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"field {loc}: {msg}{more}"


def parse_line(line: str, where: str) -> LogSession:
    """One session from one line; ``LogFormatError`` naming ``where`` and the field."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as e:
        raise LogFormatError(
            f"{where}: not JSON ({e.msg} at char {e.pos}); each line must be one session as a "
            "JSON object (docs/logs.md)"
        ) from None
    except RecursionError:
        raise LogFormatError(f"{where}: the JSON is nested too deeply to read") from None
    if not isinstance(data, dict):
        raise LogFormatError(f"{where}: a session is a JSON object, got {type(data).__name__}")
    try:
        return LogSession.model_validate(data)
    except ValidationError as e:
        raise LogFormatError(f"{where}: {_where(e)}. See docs/logs.md for the format") from None


def read_logs(path: str | Path) -> list[LogSession]:
    """Every session of a JSONL log file (blank lines skipped), checked; session ids unique."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no log file at {path}: give a JSONL file of sessions") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the log file {path}: {e}") from None
    sessions: list[LogSession] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        s = parse_line(line, f"{path}, line {lineno}")
        if s.session_id in seen:
            raise LogFormatError(
                f"{path}, line {lineno}: field session_id: {s.session_id!r} is already the id of "
                f"line {seen[s.session_id]}; session ids must be unique"
            )
        seen[s.session_id] = lineno
        sessions.append(s)
    if not sessions:
        raise LogFormatError(f"{path} holds no session: write one JSON object per line")
    return sessions


def dump_session(session: LogSession) -> str:
    """One line of the format (no newline)."""
    data = session.model_dump(mode="json")
    data["messages"] = [{k: v for k, v in m.items() if v is not None} for m in data["messages"]]
    data = {k: v for k, v in data.items() if v is not None}
    return json.dumps(data, ensure_ascii=False)


def write_logs(sessions: Iterable[LogSession], path: str | Path) -> int:
    """Write ``sessions`` as a JSONL log file; the number written."""
    lines = [dump_session(s) for s in sessions]
    Path(path).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return len(lines)
