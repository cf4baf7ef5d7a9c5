"""The agent contract: ``act(observation) -> Action``, one instance per episode."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

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
    """A model plus a harness plus operating settings. ``spec`` says which, for every result.

    The engine calls ``spawn()`` for a fresh instance per episode, then ``start(ctx)``, then
    ``act(observation)`` until the environment says done, then ``close()``.
    """

    name: ClassVar[str] = ""
    privileged: ClassVar[bool] = False

    _init_args: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        obj = super().__new__(cls)
        obj._init_args = (args, kwargs)
        return obj

    @property
    @abstractmethod
    def spec(self) -> AgentSpec:
        """Model, harness and settings of this agent."""

    async def start(self, ctx: EpisodeContext) -> None:
        """Begin an episode."""
        return None

    @abstractmethod
    async def act(self, observation: Observation) -> Action:
        """The next action, given the latest observation."""

    def token_view(self) -> TokenView | None:
        """Token ids, loss mask and logprobs of the episode, when the model returned them."""
        return None

    async def close(self) -> None:
        return None

    def spawn(self) -> Self:
        args, kwargs = self._init_args
        return type(self)(*args, **kwargs)
