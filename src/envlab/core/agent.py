"""The agent contract: ``act(observation) -> Action``; a factory makes one agent per episode."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from envlab.core.tools import ToolSpec
from envlab.core.trajectory import AgentSpec, TokenView
from envlab.core.types import Action, Observation, Task


@dataclass(slots=True)
class EpisodeContext:
    """What an agent is told when an episode starts.

    ``task`` and ``oracle_actions`` are filled only for agents whose spec is ``privileged``.
    """

    task_id: str
    prompt: str
    tools: list[ToolSpec]
    seed: int
    system_prompt: str | None = None
    task: Task | None = None
    oracle_actions: list[Action] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Agent(ABC):
    """A model plus a harness plus operating settings, for one episode. ``spec`` says which.

    The engine gets a fresh one from an ``AgentFactory`` per episode, calls ``start(ctx)``, then
    ``act(observation)`` until the environment says done, then ``close()``.
    """

    name: ClassVar[str] = ""
    privileged: ClassVar[bool] = False

    @property
    @abstractmethod
    def spec(self) -> AgentSpec:
        """Model, harness and settings of this agent."""

    async def start(self, ctx: EpisodeContext) -> None:
        """Begin the episode."""
        return None

    @abstractmethod
    async def act(self, observation: Observation) -> Action:
        """The next action, given the latest observation."""

    def transcript(self) -> list[dict[str, Any]] | None:
        """The messages exactly as the model received them, in order, each model turn's reply
        included as sent back; ``None`` for an agent without a model (the engine then records
        the observations and actions as messages)."""
        return None

    def token_view(self) -> TokenView | None:
        """Token ids, loss mask and logprobs of the episode, when the model returned them."""
        return None

    async def close(self) -> None:
        return None


class AgentFactory(ABC):
    """Makes the agent of each episode and owns what a run's agents share (a pooled HTTP
    client, a loaded model): ``aclose()`` releases it when the run ends."""

    @property
    @abstractmethod
    def spec(self) -> AgentSpec:
        """The spec every agent made here records."""

    @abstractmethod
    def new_agent(self) -> Agent:
        """A fresh agent for one episode."""

    async def aclose(self) -> None:
        """Release what the run's agents shared."""
        return None


class AgentClass(AgentFactory):
    """The factory of an agent class with fixed arguments: ``AgentClass(OracleAgent)``."""

    def __init__(self, make: Callable[..., Agent], *args: Any, **kwargs: Any) -> None:
        self._make, self._args, self._kwargs = make, args, kwargs
        self._spec: AgentSpec | None = None

    @property
    def spec(self) -> AgentSpec:
        if self._spec is None:
            self._spec = self.new_agent().spec
        return self._spec

    def new_agent(self) -> Agent:
        return self._make(*self._args, **self._kwargs)
