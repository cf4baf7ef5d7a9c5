"""How an envlab agent meets a plain OpenEnv server: its action schema as one tool, its
observations as text.

An OpenEnv environment takes one typed action per step (``/schema``'s ``action``: e.g.
``{"message": str}``) and answers an observation dict. The agent sees the action as one tool,
``step``, whose parameters are that schema (less OpenEnv's ``metadata`` field, which the agent
may not set). A text answer with no tool call is sent as the action's one string field when the
schema has exactly one (a chat-style environment), else as the action itself when it is a JSON
object. An empty answer with no tool call is the agent stopping: nothing is sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from envlab.core import ToolSpec
from envlab.core.errors import ToolCallError

STEP_TOOL = "step"
RESERVED_FIELDS = frozenset({"metadata"})
"""Fields of OpenEnv's base ``Action`` the agent may not set (they carry the client's data)."""


class _AnyArguments(BaseModel):
    model_config = ConfigDict(extra="allow")


ANY_ARGUMENTS: type[BaseModel] = create_model("RemoteArguments", __base__=_AnyArguments)
"""The arguments model of a remote tool: the server validates them, not this side."""


def remote_tool(fn: dict[str, Any]) -> ToolSpec:
    """A tool the server declared (OpenAI function format, or the function itself)."""
    f = fn.get("function", fn) if isinstance(fn, dict) else {}
    params = f.get("parameters") if isinstance(f.get("parameters"), dict) else {}
    return ToolSpec(
        name=str(f.get("name", "")),
        description=str(f.get("description", "")),
        parameters=params or {"type": "object", "properties": {}},
        model=ANY_ARGUMENTS,
        attr=str(f.get("name", "")),
        writes=bool(f.get("writes", fn.get("writes", False) if isinstance(fn, dict) else False)),
    )


@dataclass(frozen=True, slots=True)
class ActionShape:
    """What a plain OpenEnv server's action looks like to an envlab agent."""

    tool: ToolSpec
    text_field: str | None
    """The action's one string field: a text answer is sent as ``{text_field: text}``."""

    @classmethod
    def of(cls, action_schema: dict[str, Any], env_name: str, description: str) -> ActionShape:
        props = dict(action_schema.get("properties") or {})
        for name in RESERVED_FIELDS:
            props.pop(name, None)
        required = [r for r in action_schema.get("required", []) if r not in RESERVED_FIELDS]
        params: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if "$defs" in action_schema:
            params["$defs"] = action_schema["$defs"]
        strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
        others_required = [r for r in required if r not in strings]
        text_field = strings[0] if len(strings) == 1 and not others_required else None
        about = f" ({description})" if description else ""
        tool = ToolSpec(
            name=STEP_TOOL,
            description=f"Take one action in the OpenEnv environment {env_name}{about}.",
            parameters=params,
            model=ANY_ARGUMENTS,
            attr=STEP_TOOL,
        )
        return cls(tool=tool, text_field=text_field)

    def action_of_call(self, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """The server's action for one tool call; ``ToolCallError`` for the agent otherwise."""
        if name != STEP_TOOL:
            raise ToolCallError(
                f"there is no tool {name!r}: this environment has one tool, {STEP_TOOL!r} "
                f"({self.tool.signature()})"
            )
        args = self.tool.decode_arguments(arguments)
        reserved = sorted(RESERVED_FIELDS & set(args))
        if reserved:
            raise ToolCallError(
                f"{', '.join(reserved)} is not an argument of {STEP_TOOL!r}: "
                f"expected {self.tool.signature()}"
            )
        return args

    def action_of_text(self, text: str) -> dict[str, Any]:
        """The server's action for a text answer; ``ToolCallError`` if it has none."""
        if self.text_field is not None:
            return {self.text_field: text}
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return self.action_of_call(STEP_TOOL, value)
        raise ToolCallError(
            f"this environment takes its actions through the tool {STEP_TOOL!r} "
            f"({self.tool.signature()}), or as a JSON object of those fields; "
            f"the answer {text[:100]!r} is neither"
        )


def observation_text(observation: Any) -> str:
    """An OpenEnv observation dict as the text the agent reads: its one non-empty string field
    when it has only that, else its fields as JSON (OpenEnv's ``metadata`` left out)."""
    if not isinstance(observation, dict):
        return json.dumps(observation, default=str)
    fields = {k: v for k, v in observation.items() if k not in RESERVED_FIELDS}
    filled = {k: v for k, v in fields.items() if v not in ("", None, [], {})}
    if len(filled) == 1:
        (value,) = filled.values()
        if isinstance(value, str):
            return value
    return json.dumps(fields, ensure_ascii=False, default=str)
