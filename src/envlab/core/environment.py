"""The episode contract: async ``reset``/``step``/``state``/``grade``/``close``, one episode."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from envlab.core.rubric import Reward
from envlab.core.tools import ToolSpec
from envlab.core.types import Action, Observation, StepResult, Task


class Environment(ABC):
    """One episode: ``reset(task, seed)``, then ``step(action)`` until done, then ``grade()``.

    An ``EnvSpec`` makes a fresh one for every episode (``spec.new_episode()``); nothing is
    shared between two episodes unless the spec shares it on purpose. ``grade()`` runs after the
    agent stopped (also after a timeout) and returns the episode's ``Reward``; ``regrade()``
    grades the same final state again, from scratch (a grader test-retest), between ``grade()``
    and ``close()``.
    """

    __slots__ = ()  # a subclass without slots of its own has a ``__dict__`` as usual

    @abstractmethod
    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start the episode on ``task``; return the first observation (the agent's prompt)."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Apply the agent's action."""

    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of the episode's state (for graders, checks, viewers)."""
        return {}

    async def grade(self) -> Reward | None:
        """The episode's reward, computed after the agent stopped. ``None``: sum step rewards."""
        return None

    async def regrade(self) -> Reward | None:
        """Grade the same final state again, from scratch; the default grades again."""
        return await self.grade()

    async def close(self) -> None:
        """Release what the episode holds (sandboxes, files, connections)."""
        return None

    async def export_workspace(self, dest: Path) -> Path | None:
        """Copy the files the agent left (its workspace) to ``dest`` on the host, for checks
        of the final state; ``None`` for an environment without a workspace. Call between
        ``grade()`` and ``close()``."""
        return None

    @property
    def tools(self) -> list[ToolSpec]:
        """Tools the agent may call (empty for a plain chat environment)."""
        return []

    def system_prompt(self) -> str | None:
        """A system prompt a harness may use for this episode."""
        return None

    def oracle_actions(self, task: Task) -> list[Action]:
        """The actions of a privileged agent that knows ``task.answer`` (a self-check), asked
        after ``reset``; the default answers ``task.answer`` as it is."""
        return [Action(text=str(task.answer))]

    @property
    def unwrapped(self) -> Environment:
        """The innermost environment, under every wrapper."""
        return self
