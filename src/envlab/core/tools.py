"""Tools as Python functions: JSON schemas from signatures and docstrings, checked calls."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from envlab.core.errors import ToolCallError
from envlab.core.text import check_text

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


def collect_tools(cls: type) -> dict[str, ToolSpec]:
    """The ``@tool`` methods of ``cls`` (its bases' too), by tool name."""
    specs: dict[str, ToolSpec] = {}
    for attr in dir(cls):
        fn = getattr(cls, attr, None)
        if is_tool(fn):
            spec = tool_spec(fn)
            specs[spec.name] = spec
    return specs


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

    def decode_arguments(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """The raw arguments as a JSON object nested at most ``MAX_ARGUMENT_DEPTH`` levels;
        ``ToolCallError`` with a message for the agent otherwise (not JSON, not an object, too
        deep to decode, copy or record)."""
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
            except RecursionError:
                raise self._too_deep() from None
            except ValueError as e:  # an integer past Python's digit limit (4300 digits)
                raise ToolCallError(
                    f"arguments for tool '{self.name}' could not be read: {e}. "
                    f"Send numbers of ordinary size, e.g. {self.example()}"
                ) from None
        if not isinstance(arguments, dict):
            raise ToolCallError(
                f"arguments for tool '{self.name}' must be a JSON object, got "
                f"{type(arguments).__name__}. Example: {self.example()}"
            )
        if _depth_over(arguments, MAX_ARGUMENT_DEPTH):
            raise self._too_deep()
        try:  # a lone surrogate (a JSON escape decodes to one) reaches no tool: no encoder
            check_text(arguments, f"arguments for tool '{self.name}'")  # writes it back out
        except ValueError as e:
            raise ToolCallError(str(e)) from None
        return arguments

    def parse_arguments(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Validate raw arguments; raise ``ToolCallError`` with a message for the agent."""
        arguments = self.decode_arguments(arguments)
        try:
            parsed = self.model.model_validate(arguments)
        except RecursionError:
            raise self._too_deep() from None
        except ValidationError as e:
            problems = "; ".join(
                f"'{'.'.join(str(p) for p in err['loc']) or '(arguments)'}': {err['msg']}"
                for err in e.errors()
            )
            raise ToolCallError(
                f"bad arguments for tool '{self.name}': {problems}. Expected {self.signature()}"
            ) from None
        return {k: getattr(parsed, k) for k in type(parsed).model_fields}

    def _too_deep(self) -> ToolCallError:
        return ToolCallError(
            f"arguments for tool '{self.name}' are nested too deeply (nested more than "
            f"{MAX_ARGUMENT_DEPTH} levels deep); send a flat JSON object, e.g. {self.example()}"
        )

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


MAX_ARGUMENT_DEPTH = 100
"""The deepest nesting of lists and objects a tool's arguments may have. Deeper arguments (a
model's reply nested 100,000 deep) are the agent's malformed call (``ToolCallError``): decoding,
validating, copying or recording them would exhaust Python's recursion limit and end the
episode as the environment's failure."""


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts more than ``limit`` levels deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return False


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
    """Derive a ``ToolSpec`` from a function's signature and docstring.

    The published schema is pydantic's, put in the plain form of a hand-written function schema
    (OpenAI's examples, τ-bench's ``tools.json``), by one rule applied at every level:

    - nested models (``typing_extensions.TypedDict`` or pydantic models, their fields described
      by ``Field(description=...)``) are inlined where they are used: no ``$defs``/``$ref``; the
      class's own title and docstring are not published (the parameter's description is);
    - no ``title``; a boolean ``additionalProperties`` (open/closed object) is not published,
      while a schema-valued one (the value type of ``dict[str, X]``) is kept. Extra arguments
      are still refused by the validator (``parse_arguments``): at the top level and inside
      TypedDicts (a pydantic model keeps its own ``extra`` setting);
    - ``Literal[...]`` is an ``enum`` (also a ``Literal`` of one value); an enum the tool checks
      itself (to answer a wrong value its own way) is
      ``Annotated[str, Field(json_schema_extra={"enum": [...]})]``;
    - keys in the order ``type, enum, description, items, properties, required``, then the rest
      (``default``, ...); the top level always has ``properties`` and ``required``;
    - descriptions are unwrapped: line breaks inside a docstring paragraph are wrapping, so a
      paragraph becomes one line (paragraphs of the summary stay apart, by a blank line).
    """
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: _unwrap(p.description or "") for p in doc.params}
    sig = inspect.signature(fn)
    try:
        hints = get_type_hints(fn, include_extras=True)
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
    raw = model.model_json_schema()
    schema = _plain(raw, raw.get("$defs", {}), (), tool_name)
    schema.setdefault("properties", {})
    schema.setdefault("required", [])
    schema = _ordered(schema)
    sep = "\n\n" if doc.blank_after_short_description else "\n"
    summary = sep.join(x for x in (doc.short_description, doc.long_description) if x)
    return ToolSpec(
        name=tool_name,
        description=_unwrap(summary),
        parameters=schema,
        model=model,
        attr=fn.__name__,
        writes=bool(getattr(fn, _WRITES_MARK, False)),
    )


_KEY_ORDER = {
    k: i for i, k in enumerate(("type", "enum", "description", "items", "properties", "required"))
}
_SUBSCHEMA = ("items", "not", "additionalProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def _unwrap(text: str) -> str:
    """Docstring text with one line per paragraph (a line break inside a paragraph is wrapping)."""
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n[ \t]*\n", text))
    return "\n\n".join(p for p in paragraphs if p)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(node.items(), key=lambda kv: _KEY_ORDER.get(kv[0], len(_KEY_ORDER))))


def _plain(
    node: dict[str, Any], defs: dict[str, Any], inlining: tuple[str, ...], tool_name: str
) -> dict[str, Any]:
    """One schema node in plain form (see ``tool_spec``); ``inlining``: the $defs being inlined
    around it (a model that contains itself cannot be inlined)."""
    if "$ref" in node:
        ref = node["$ref"].rsplit("/", 1)[-1]
        if ref in inlining or ref not in defs:
            raise TypeError(
                f"tool {tool_name}: the type {ref} refers to itself (or is unknown), so its "
                "schema cannot be inlined; use a non-recursive type for tool parameters"
            )
        own = {k: v for k, v in defs[ref].items() if k not in ("title", "description")}
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _plain({**own, **siblings}, defs, (*inlining, ref), tool_name)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs") or (key == "additionalProperties" and isinstance(value, bool)):
            continue
        if key == "properties":
            out[key] = {p: _plain(s, defs, inlining, tool_name) for p, s in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = _plain(value, defs, inlining, tool_name)
        elif key in _SUBSCHEMA_LISTS:
            out[key] = [_plain(s, defs, inlining, tool_name) for s in value]
        elif key == "const":
            out.setdefault("enum", [value])
        else:
            out[key] = value
    return _ordered(out)
