"""The tools of a τ domain: ``@tool`` methods of a mixin over the episode's ``Database``."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from envlab.core import ToolCallError
from envlab.core.tools import ToolSpec, collect_tools
from envlab.envs.tau.db import Database


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
            if spec is None:
                raise ToolCallError(f"unknown tool '{name}'")
            value = getattr(self, spec.attr)(**spec.parse_arguments(arguments))
            assert not inspect.isawaitable(value), "τ tools are synchronous"
        except ToolCallError as e:
            return f"Error: {e}"
        return value if isinstance(value, str) else repr(value)
