"""The environment contract: async ``reset``/``step``/``state``/``close``, gymnasium in spirit."""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Self

from envlab.core.rubric import Reward
from envlab.core.tools import ToolSpec
from envlab.core.types import Action, Observation, StepResult, Task, TaskSet


class Environment(ABC):
    """One episode at a time: ``reset(task, seed)`` then ``step(action)`` until done.

    An instance serves one episode; the rollout engine calls ``spawn()`` for a fresh one, with
    the same constructor arguments, for every episode. ``grade()`` runs after the agent stopped
    (also after a timeout) and returns the episode's ``Reward``.
    """

    id: ClassVar[str] = ""
    description: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    max_steps: int = 50

    _init_args: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        obj = super().__new__(cls)
        obj._init_args = (args, kwargs)
        return obj

    # --- the episode -------------------------------------------------------------------------
    @abstractmethod
    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        """Start an episode on ``task``; return the first observation (the agent's prompt)."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Apply the agent's action."""

    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot of the episode's state (for hygiene checks and viewers)."""
        return {}

    async def grade(self) -> Reward | None:
        """The episode's reward, computed after the agent stopped. ``None``: sum step rewards."""
        return None

    async def regrade(self) -> Reward | None:
        """Grade the same final state again, from scratch: a grader test-retest. Call after
        ``grade()`` and before ``close()``; the default grades again."""
        return await self.grade()

    async def close(self) -> None:
        """Release what the episode holds (sandboxes, files, connections)."""
        return None

    # --- the environment as a whole ----------------------------------------------------------
    @abstractmethod
    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        """The tasks of this environment, deterministic in ``seed``."""

    @property
    def tools(self) -> list[ToolSpec]:
        """Tools the agent may call (empty for a plain chat environment)."""
        return []

    def system_prompt(self) -> str | None:
        """A system prompt a harness may use for this environment."""
        return None

    def oracle_actions(self, task: Task) -> list[Action]:
        """The actions of a privileged agent that knows ``task.answer``: a self-check."""
        return [Action(text=f"The answer is {task.answer}.")]

    def spawn(self) -> Self:
        """A fresh instance with the same configuration, for one episode."""
        args, kwargs = self._init_args
        return type(self)(*args, **kwargs)

    @property
    def config(self) -> dict[str, Any]:
        args, kwargs = self._init_args
        return {"args": list(args), **kwargs}

    def content_hash(self) -> str:
        """Hash of what defines this environment: its code (every class in its MRO) and config."""
        h = hashlib.sha256()
        for klass in type(self).__mro__:
            if klass.__module__.startswith(("builtins", "abc")) or klass is object:
                continue
            try:
                h.update(inspect.getsource(klass).encode())
            except (OSError, TypeError):
                h.update(klass.__qualname__.encode())
        h.update(json.dumps(self.config, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]
