"""Agents without a model: self-checks and baselines (``noop``, ``oracle``, ``random``)."""

from __future__ import annotations

import random
from typing import Any

from envlab.core import Action, Agent, AgentSpec, ConfigError, EpisodeContext, Observation, ToolCall
from envlab.core.tools import ToolSpec


class NoopAgent(Agent):
    """Stops at once with an empty answer. Any environment where it scores is suspect."""

    name = "noop"

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:noop")

    async def act(self, observation: Observation) -> Action:
        return Action(text="")


class OracleAgent(Agent):
    """A privileged agent that replays the environment's reference solution.

    It reads hidden task data, so its score checks the environment (a solvable task, a grader
    that accepts the right answer), never an agent's skill.
    """

    name = "oracle"
    privileged = True

    def __init__(self) -> None:
        self._queue: list[Action] = []

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:oracle", privileged=True)

    async def start(self, ctx: EpisodeContext) -> None:
        if ctx.oracle_actions is None:
            raise ConfigError("the oracle agent needs privileged access; the engine gave none")
        self._queue = list(ctx.oracle_actions)

    async def act(self, observation: Observation) -> Action:
        return self._queue.pop(0) if self._queue else Action(text="")


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
