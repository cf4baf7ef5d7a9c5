"""Tools as Python functions: JSON schemas from signatures and docstrings, checked calls."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from envlab.core.errors import ToolCallError

_TOOL_MARK = "__envlab_tool__"
_WRITES_MARK = "__envlab_tool_writes__"


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, writes: bool = False
) -> Any:
    """Mark a method of a ``ToolEnv`` as a tool the agent may call.

    The schema comes from the signature (types, defaults) and the docstring (Google, NumPy or
    reST style: the summary describes the tool, ``Args:`` describe the parameters).
    ``writes=True`` marks a tool that changes the environment's state (a database write, a
    booking); the others only read it. Safety gates and perturbations (stale reads) use it.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, _TOOL_MARK, name or f.__name__)
        setattr(f, _WRITES_MARK, writes)
        return f

    return mark(fn) if fn is not None else mark


def is_tool(obj: Any) -> bool:
    return callable(obj) and hasattr(obj, _TOOL_MARK)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: its name, description, JSON schema, and the validator for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    model: type[BaseModel]
    attr: str
    writes: bool = False
    """The tool changes the environment's state (``@tool(writes=True)``); else it only reads."""
    openai: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The tool in the OpenAI chat-completions ``tools`` format (made once; do not mutate)."""

    def __post_init__(self) -> None:
        function = {"name": self.name, "description": self.description}
        object.__setattr__(
            self,
            "openai",
            {"type": "function", "function": {**function, "parameters": self.parameters}},
        )

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI chat-completions ``tools`` format (a copy to change freely)."""
        return {"type": "function", "function": dict(self.openai["function"])}

    def parse_arguments(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Validate raw arguments; raise ``ToolCallError`` with a message for the agent."""
        if isinstance(arguments, str):
            text = arguments.strip() or "{}"
            try:
                arguments = json.loads(text)
            except json.JSONDecodeError as e:
                raise ToolCallError(
                    f"arguments for tool '{self.name}' are not valid JSON "
                    f"({e.msg} at char {e.pos}): "
                    f"{text[:200]!r}. Send a JSON object, e.g. {self.example()}"
                ) from None
        if not isinstance(arguments, dict):
            raise ToolCallError(
                f"arguments for tool '{self.name}' must be a JSON object, got "
                f"{type(arguments).__name__}. Example: {self.example()}"
            )
        try:
            parsed = self.model.model_validate(arguments)
        except ValidationError as e:
            problems = "; ".join(
                f"'{'.'.join(str(p) for p in err['loc']) or '(arguments)'}': {err['msg']}"
                for err in e.errors()
            )
            raise ToolCallError(
                f"bad arguments for tool '{self.name}': {problems}. Expected {self.signature()}"
            ) from None
        return {k: getattr(parsed, k) for k in type(parsed).model_fields}

    def signature(self) -> str:
        props = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", []))
        parts = []
        for k, v in props.items():
            typ = v.get("type", "any")
            parts.append(f"{k}: {typ}" + ("" if k in required else " (optional)"))
        return f"{self.name}({', '.join(parts)})"

    def example(self) -> str:
        return json.dumps(example_arguments(self.parameters))


_SAMPLES: dict[str, Any] = {
    "integer": 2,
    "number": 2,
    "string": "text",
    "boolean": True,
    "array": [],
    "object": {},
}


def example_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """Placeholder arguments for a JSON schema's properties (the first enum value, or a sample
    of the type), to show an agent the shape of a call."""
    props = parameters.get("properties", {})
    return {
        k: (v["enum"][0] if v.get("enum") else _SAMPLES.get(v.get("type", ""), "value"))
        for k, v in props.items()
    }


def tool_spec(fn: Callable[..., Any], name: str | None = None) -> ToolSpec:
    """Derive a ``ToolSpec`` from a function's signature and docstring."""
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: (p.description or "") for p in doc.params}
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn)
    except Exception as e:  # unresolved forward references are an authoring bug
        raise TypeError(f"cannot resolve type hints of tool {fn.__qualname__}: {e}") from e
    fields: dict[str, Any] = {}
    for pname, p in sig.parameters.items():
        if pname == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = hints.get(pname, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[pname] = (ann, Field(default, description=param_docs.get(pname) or None))
    tool_name = name or getattr(fn, _TOOL_MARK, None) or fn.__name__
    model = create_model(  # type: ignore[call-overload]
        f"{tool_name}_args",
        __config__=ConfigDict(extra="forbid", strict=False),
        **fields,
    )
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.setdefault("properties", {})
    description = " ".join(x for x in (doc.short_description, doc.long_description) if x)
    return ToolSpec(
        name=tool_name,
        description=description.strip(),
        parameters=schema,
        model=model,
        attr=fn.__name__,
        writes=bool(getattr(fn, _WRITES_MARK, False)),
    )
