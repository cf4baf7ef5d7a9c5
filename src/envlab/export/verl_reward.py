"""verl's custom reward function, graded by envlab: ``custom_reward_function.path`` set to this
file and ``custom_reward_function.name=compute_score``.

verl's reward manager (``verl/workers/reward_manager/naive.py``, verl ``b178a3cd``) calls
``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` once per rollout, with
the row's ``data_source``, ``reward_model["ground_truth"]`` and ``extra_info`` of an envlab
``--format verl`` export. The rollout's decoded reply is graded as the final answer of one
episode of the row's task (``ground_truth`` is the task id; ``extra_info`` rebuilds the run's
environment and task set, ``envs.reopen``): the environment's reset, the reply as the agent's only
action, the grader after the agent is gone, exactly as ``envlab eval`` grades an answer.

What grading cannot vouch for raises instead of returning a number, so no reward verl learns
from is one envlab would not count: another environment than the export's (its content hash
differs), a task set that is not the run's, an unknown task, and an episode the machinery
failed (``infra_error``/``env_error``). A reply the grader rejects is 0 like any wrong answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from envlab.core import (
    Action,
    Agent,
    AgentFactory,
    AgentSpec,
    ConfigError,
    EnvlabError,
    EnvSpec,
    Observation,
    Task,
)

PREFIX = "envlab:"


class _Reply(Agent):
    """Answers every observation with the rollout's reply (the first answer ends the episode)."""

    name = "verl-rollout"

    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="verl:reply")

    async def act(self, observation: Observation) -> Action:
        return Action(text=self.text)


class _Replies(AgentFactory):
    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=_Reply.name, harness="verl:reply")

    def new_agent(self) -> Agent:
        return _Reply(self.text)


class _Grader:
    """One environment of an export, its tasks, and the event loop its episodes run on."""

    def __init__(self, env_id: str, config: Mapping[str, Any], env_hash: str) -> None:
        from envlab.envs.reopen import reopen_spec

        spec, why = reopen_spec(env_id, config)
        if spec is None:
            raise ConfigError(f"verl reward: cannot open environment {env_id!r} here: {why}")
        if spec.content_hash() != env_hash:
            raise ConfigError(
                f"verl reward: environment {env_id!r} here has content hash "
                f"{spec.content_hash()}, the export's rows {env_hash}: other code than the run "
                "that was exported. Export again from a run of this code"
            )
        self.spec: EnvSpec = spec
        self.tasks: dict[tuple[int, int, str], dict[str, Task]] = {}
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="verl-reward").start()

    def task(self, task_id: str, info: Mapping[str, Any]) -> Task:
        """Task ``task_id`` of the run's task set, rebuilt once (``envs.reopen``)."""
        from envlab.envs.reopen import run_task_set

        key = (int(info["task_seed"]), int(info["n_tasks"]), str(info["task_set_hash"]))
        if key not in self.tasks:
            tasks = run_task_set(self.spec, *key)
            if tasks is None:
                raise ConfigError(
                    f"verl reward: no split of {self.spec.name!r} gives the exported run's "
                    f"{key[1]} tasks of seed {key[0]} (task set hash {key[2]}): other tasks "
                    "than the run's. Export again from a run of this environment"
                )
            self.tasks[key] = {t.id: t for t in tasks}
        task = self.tasks[key].get(task_id)
        if task is None:
            raise ConfigError(f"verl reward: the run's task set has no task {task_id!r}")
        return task

    def grade(self, task: Task, reply: str, run_seed: int) -> float:
        future = asyncio.run_coroutine_threadsafe(self._episode(task, reply, run_seed), self.loop)
        return future.result()

    async def _episode(self, task: Task, reply: str, run_seed: int) -> float:
        from envlab.rollout.driver import PlannedEpisode, episode_ids, run_episode

        ids = episode_ids(self.spec.name, self.spec.seed_hash(), task.id, run_seed, 0)
        planned = PlannedEpisode(task, 0, ids, _Replies(reply))
        traj = await run_episode(self.spec, planned)
        if not traj.scored or traj.reward is None:
            why = traj.error.message if traj.error is not None else traj.status
            raise EnvlabError(
                f"verl reward: the episode grading task {task.id!r} ended {traj.status} (the "
                f"machinery's failure, not the reply's): {why}"
            )
        return float(traj.reward)


@lru_cache(maxsize=16)
def _grader(env_id: str, config_json: str, env_hash: str) -> _Grader:
    return _Grader(env_id, json.loads(config_json), env_hash)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **_: Any,
) -> float:
    """The reward of ``solution_str`` as the answer to task ``ground_truth`` of the row's
    environment (see the module's doc); verl's other keyword arguments are ignored."""
    if not data_source.startswith(PREFIX):
        raise ConfigError(
            f"verl reward: data_source {data_source!r} is not an envlab export's "
            f"({PREFIX}<env id>); route other sources to their own reward function"
        )
    info = dict(extra_info or {})
    keys = ("env_hash", "env_config", "task_seed", "n_tasks", "task_set_hash")
    missing = [k for k in keys if k not in info]
    if missing:
        raise ConfigError(
            f"verl reward: extra_info lacks {', '.join(missing)}: export the run again with "
            "this envlab (envlab export RUN --format verl)"
        )
    grader = _grader(data_source[len(PREFIX) :], str(info["env_config"]), str(info["env_hash"]))
    return grader.grade(grader.task(ground_truth, info), solution_str, int(info["task_seed"]))
