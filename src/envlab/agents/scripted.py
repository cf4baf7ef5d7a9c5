"""Agents without a model: self-checks and baselines (``noop``, ``oracle``, ``random``)."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from envlab.core import Action, Agent, AgentSpec, ConfigError, EpisodeContext, Observation, ToolCall
from envlab.core.toolenv import RETRYABLE_MARK
from envlab.core.tools import ToolSpec


class NoopAgent(Agent):
    """Stops at once with an empty answer. Any environment where it scores is suspect."""

    name = "noop"

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:noop")

    async def act(self, observation: Observation) -> Action:
        return Action(text="")


DEFAULT_RETRIES = 5
"""How many times in a row the oracle sends a call again after a retryable error."""


class OracleAgent(Agent):
    """A privileged agent that replays the environment's reference solution.

    It reads hidden task data, so its score checks the environment (a solvable task, a grader
    that accepts the right answer), never an agent's skill. A call answered with a retryable
    error (``RETRYABLE_MARK``: a transient failure, a rate limit; the tool was not run) is sent
    again, unchanged, up to ``max_retries`` times in a row, before the next action.
    """

    name = "oracle"
    privileged = True

    def __init__(self, max_retries: int = DEFAULT_RETRIES) -> None:
        if max_retries < 0:
            raise ConfigError(f"the oracle's max_retries must be >= 0, got {max_retries}")
        self.max_retries = max_retries
        self._queue: list[Action] = []
        self._last: Action | None = None
        self._retries = 0

    @property
    def spec(self) -> AgentSpec:
        limits = {} if self.max_retries == DEFAULT_RETRIES else {"max_retries": self.max_retries}
        return AgentSpec(name=self.name, harness="scripted:oracle", privileged=True, limits=limits)

    async def start(self, ctx: EpisodeContext) -> None:
        if ctx.oracle_actions is None:
            raise ConfigError("the oracle agent needs privileged access; the engine gave none")
        self._queue = list(ctx.oracle_actions)

    async def act(self, observation: Observation) -> Action:
        again = self._to_retry(observation)
        if again and self._retries < self.max_retries:
            self._retries += 1
            calls = [replace(c, id=f"{c.id}_retry{self._retries}" if c.id else "") for c in again]
            self._last = Action(tool_calls=calls)
            return self._last
        self._retries = 0
        self._last = self._queue.pop(0) if self._queue else Action(text="")
        return self._last

    def _to_retry(self, observation: Observation) -> list[ToolCall]:
        """The calls of the last action answered with a retryable error (results come in the
        order of the calls)."""
        if self._last is None or not self._last.tool_calls:
            return []
        return [
            call
            for call, r in zip(self._last.tool_calls, observation.tool_results, strict=False)
            if r.is_error and r.content.startswith(f"Error: {RETRYABLE_MARK}")
        ]


def _random_value(schema: dict[str, Any], r: random.Random) -> Any:
    t = schema.get("type")
    if "enum" in schema:
        return r.choice(schema["enum"])
    if t == "integer":
        return r.randint(-10, 100)
    if t == "number":
        return round(r.uniform(-10, 100), r.choice([0, 2]))
    if t == "boolean":
        return r.random() < 0.5
    if t == "array":
        return []
    if t == "object":
        return {}
    return r.choice(["", "a", "test", "42"])


class RandomAgent(Agent):
    """Calls random tools with random well-typed arguments, then answers a random number.

    A floor for learning signal: an environment where it scores often is too easy or leaky.
    """

    name = "random"

    def __init__(self, max_tool_steps: int = 3) -> None:
        self.max_tool_steps = max_tool_steps
        self._rng = random.Random(0)
        self._tools: list[ToolSpec] = []
        self._left = 0

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(
            name=self.name,
            harness="scripted:random",
            limits={"max_tool_steps": self.max_tool_steps},
        )

    async def start(self, ctx: EpisodeContext) -> None:
        self._rng = random.Random(ctx.seed)
        self._tools = ctx.tools
        self._left = self._rng.randint(0, self.max_tool_steps) if ctx.tools else 0

    async def act(self, observation: Observation) -> Action:
        r = self._rng
        if self._left > 0:
            self._left -= 1
            spec = r.choice(self._tools)
            props = spec.parameters.get("properties", {})
            args = {k: _random_value(v, r) for k, v in props.items()}
            return Action(tool_calls=[ToolCall(spec.name, args, id=f"rnd_{self._left}")])
        return Action(text=f"The answer is {r.randint(0, 100)}.")
