"""Plain data of one episode: tasks, observations, actions, step results."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envlab.core.errors import ConfigError, NotFoundError


class Task(BaseModel):
    """One problem: what the agent sees (``prompt``) and what it must never see (``answer``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str
    answer: Any = None
    """Hidden reference answer or data; never shown to a non-privileged agent."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    split: str = "test"

    def public_view(self) -> dict[str, Any]:
        """What a non-privileged agent may know about the task."""
        return {"id": self.id, "prompt": self.prompt, "split": self.split}


class TaskSet(Sequence[Task]):
    """An ordered, seeded collection of tasks with unique ids."""

    def __init__(self, tasks: Sequence[Task], *, seed: int = 0, name: str = "") -> None:
        seen: set[str] = set()
        for t in tasks:
            if t.id in seen:
                raise ConfigError(
                    f"duplicate task id {t.id!r} in task set {name!r}; ids must be unique"
                )
            seen.add(t.id)
        self._tasks = list(tasks)
        self.seed = seed
        self.name = name

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, i: int) -> Task:  # type: ignore[override]
        return self._tasks[i]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def head(self, n: int | None) -> TaskSet:
        return self if n is None else TaskSet(self._tasks[:n], seed=self.seed, name=self.name)

    def by_id(self, task_id: str) -> Task:
        for t in self._tasks:
            if t.id == task_id:
                return t
        known = ", ".join(t.id for t in self._tasks[:5])
        raise NotFoundError(
            f"no task {task_id!r} in task set {self.name!r} ({len(self)} tasks: {known}"
            f"{', ...' if len(self) > 5 else ''}); check the id, --split and --seed"
        )

    def content_hash(self) -> str:
        h = hashlib.sha256()
        for t in self._tasks:
            h.update(t.model_dump_json().encode())
        return h.hexdigest()[:16]


@dataclass(slots=True)
class ToolCall:
    """A request to call a tool. From a model, ``arguments`` is always the text it wrote (the
    environment decodes it, once); a dict comes only from a scripted agent."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": args},
        }


@dataclass(slots=True)
class Action:
    """What an agent does in one step: text, tool calls, or both.

    An action with no tool calls is the agent's final answer in chat-style environments.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    """Agent-side details (token ids, logprobs, usage, raw output); recorded, not interpreted."""

    def to_message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return msg


@dataclass(slots=True)
class ToolResult:
    """The answer to one tool call."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False

    def to_message(self) -> dict[str, Any]:
        return {
            "role": "tool",
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "content": self.content,
        }


@dataclass(slots=True)
class Observation:
    """What the agent sees after ``reset`` or ``step``: text and/or tool results."""

    text: str = ""
    tool_results: list[ToolResult] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_messages(self, role: str = "user") -> list[dict[str, Any]]:
        msgs = [r.to_message() for r in self.tool_results]
        if self.text:
            msgs.append({"role": role, "content": self.text})
        return msgs


@dataclass(slots=True)
class StepResult:
    """gymnasium's five-tuple, async and typed."""

    observation: Observation
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
