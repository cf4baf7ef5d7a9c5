"""The tools of a τ domain: ``@tau_tool`` methods of a mixin over the episode's ``Database``.

τ-bench checks no argument: ``Env.step`` (``tau_bench/envs/base.py``) calls
``tool.invoke(data, **kwargs)`` with the agent's JSON as it is, and answers any exception as
``"Error: <exception>"``. A string where a number is expected fails where the tool computes with
it (``50 * "2"`` then ``int += str``); a float or a bool passes and is stored as sent (and then
fails the grade's hash). So the tools here take each argument as sent too (``Sent``: the schema
still publishes τ-bench's type), do what τ-bench's tool does with it in the same order, and
answer the Python errors that does raise as τ-bench does (``tau_tool``). The one check before
any tool runs: text that cannot be encoded (a lone surrogate, JSON's ``"\\ud800"``) is refused
(``check_encodable``), where τ-bench would fail later, hashing or printing it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from envlab.core import ToolCallError
from envlab.core.tools import ToolSpec, collect_tools, tool
from envlab.envs.tau.db import Database

TAU_ERRORS = (TypeError, KeyError, AttributeError, IndexError, ValueError, OverflowError)
"""What τ-bench's tools raise on an argument of the wrong type or shape, answered to the agent
as ``"Error: <exception>"`` (``KeyError('date')`` reads ``Error: 'date'``)."""


def _as_sent(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Sent:
    """``Annotated[Any, Sent(T)]``: the schema publishes ``T``; the tool gets what was sent."""

    published: Any

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema = handler.generate_schema(self.published)
        return core_schema.no_info_plain_validator_function(
            _as_sent, json_schema_input_schema=schema
        )


Text = Annotated[Any, Sent(str)]
"""A string in the schema; any JSON value at the tool."""
TextList = Annotated[Any, Sent(list[str])]
Integer = Annotated[Any, Sent(int)]


def tau_tool(fn: Callable[..., Any] | None = None, *, writes: bool = False) -> Any:
    """``@tool`` for a τ tool: the Python errors its body raises on the agent's arguments
    (``TAU_ERRORS``) are the agent's tool errors, with the text τ-bench shows."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return f(*args, **kwargs)
            except TAU_ERRORS as e:
                raise ToolCallError(str(e)) from None

        return tool(run, writes=writes)  # type: ignore[no-any-return]

    return mark(fn) if fn is not None else mark


def check_encodable(name: str, arguments: Any) -> None:
    """Refuse a call whose name, argument names or string values cannot be encoded as UTF-8
    (lone surrogates), before it reaches a tool, SQLite or a log: ``ToolCallError``."""
    stack = [("tool name", name), ("arguments", arguments)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ToolCallError(
                    f"the {where} hold text that is not valid Unicode (a lone surrogate such as "
                    f"\\u{ord(value[e.start]):04x} at character {e.start}); send plain UTF-8 text"
                ) from None
        elif isinstance(value, dict):
            stack.extend(("argument names", k) for k in value)
            stack.extend((where, v) for v in value.values())
        elif isinstance(value, list):
            stack.extend((where, v) for v in value)


class DomainTools:
    """A domain's tools; ``db`` is the episode's own database copy.

    A tool returns what τ-bench's tool returns (records as ``json.dumps`` of them, messages as
    text) and raises ``ToolCallError`` where τ-bench answers ``"Error: ..."``: the agent reads
    the same text, and the engine counts it as a tool error."""

    db: Database
    tool_specs: ClassVar[dict[str, ToolSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.tool_specs = collect_tools(cls)

    def call(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Call a tool as the agent would (arguments checked against its schema); the text the
        agent reads back, ``"Error: ..."`` for a refused call."""
        spec = self.tool_specs.get(name)
        try:
            check_encodable(name, arguments)
            if spec is None:
                raise ToolCallError(f"unknown tool '{name}'")
            decoded = spec.decode_arguments(arguments)
            check_encodable(name, decoded)
            value = getattr(self, spec.attr)(**spec.parse_arguments(decoded))
            assert not inspect.isawaitable(value), "τ tools are synchronous"
        except ToolCallError as e:
            return f"Error: {e}"
        return value if isinstance(value, str) else repr(value)
