"""The rows TRL reads: one per task, a conversational ``prompt`` and the ``task_id``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envlab.core import ConfigError, EnvSpec, Task
from envlab.core.toolenv import ToolEnv

TASK_KEY = "envlab_task"
"""The key of the user message of a row's ``prompt`` that names its task (chat templates
ignore it): ``rollout_func`` receives only the prompts, and needs to know their tasks."""


def _opening(spec: EnvSpec, task: Task) -> str:
    """The first user message when it is the task's prompt (a ``ToolEnv`` that does not
    override ``prompt``); otherwise ``""``, and ``reset`` supplies it (e.g. a simulated user's
    opening line: never the task's hidden instruction)."""
    cls = spec.environment
    if isinstance(cls, type) and issubclass(cls, ToolEnv) and cls.prompt is ToolEnv.prompt:
        return task.prompt
    return ""


def task_messages(spec: EnvSpec, task: Task) -> list[dict[str, Any]]:
    """The conversational prompt of ``task``: the episode's system prompt, then the user turn
    (its ``TASK_KEY`` names the task)."""
    system = spec.new_episode().system_prompt()
    user = {"role": "user", "content": _opening(spec, task), TASK_KEY: task.id}
    if system:
        return [{"role": "system", "content": system, TASK_KEY: None}, user]
    return [user]


def task_dataset(spec: EnvSpec, tasks: Sequence[Task]) -> Any:
    """A ``datasets.Dataset`` of ``tasks``: ``prompt`` (conversational) and ``task_id``."""
    from datasets import Dataset

    rows = [{"prompt": task_messages(spec, t), "task_id": t.id} for t in tasks]
    return Dataset.from_list(rows)


def task_index(tasks: Sequence[Task]) -> dict[str, Task]:
    index: dict[str, Task] = {}
    for t in tasks:
        if t.id in index:
            raise ConfigError(f"two tasks share the id {t.id!r}: task ids must be unique")
        index[t.id] = t
    return index
