"""The environment and the tasks a recorded run ran, opened again from what it recorded.

A run records its environment by id and configuration (``run.json``'s ``env_id`` and
``env_config``) and its tasks by id and seed, never by their hidden data: what reads a run
later and needs the real thing (``envlab sim-from-logs``, verl's reward function) opens them
here, the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envlab.core import EnvlabError, EnvSpec, Task, TaskSet


def reopen_spec(
    env_id: str, env_config: Mapping[str, Any], also: Iterable[str] = ()
) -> tuple[EnvSpec | None, str]:
    """The spec recorded as ``env_id`` with ``env_config``, tried by that name, then by each
    name of ``also`` (the command line's), then, for a task folder (its config names its
    ``path``), by its path. ``(None, why)`` when none opens."""
    from envlab.envs import load_env

    config = dict(env_config)
    tries: list[tuple[str, dict[str, Any]]] = [(n, config) for n in dict.fromkeys([env_id, *also])]
    if isinstance(config.get("path"), str):
        tries.append((config["path"], {k: v for k, v in config.items() if k != "path"}))
    problems = []
    for name, kwargs in tries:
        try:
            return load_env(name, **kwargs), name
        except EnvlabError as e:
            problems.append(f"{name}: {e}")
    return None, "; ".join(problems)


def _splits(spec: EnvSpec) -> list[str]:
    return list(dict.fromkeys(["test", *getattr(spec, "splits", ())]))


def tasks_by_id(spec: EnvSpec, seed: int) -> dict[str, Task]:
    """Every task of ``spec``'s splits with task seed ``seed``, by id."""
    found: dict[str, Task] = {}
    for split in _splits(spec):
        try:
            found.update((t.id, t) for t in spec.tasks(seed=seed, split=split))
        except EnvlabError:
            continue
    return found


def run_task_set(spec: EnvSpec, seed: int, n: int, task_set_hash: str) -> TaskSet | None:
    """The task set a run recorded (its seed, size and content hash), rebuilt from one of
    ``spec``'s splits; ``None`` when no split gives it (other tasks than the run's)."""
    for split in _splits(spec):
        try:
            tasks = spec.tasks(seed=seed, n=n, split=split)
        except EnvlabError:
            continue
        if tasks.content_hash() == task_set_hash:
            return tasks
    return None
