"""Many episodes: tasks x samples, grouped by task, concurrent, recorded in a run directory."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envlab import __version__
from envlab.core import (
    Agent,
    AgentSpec,
    ConfigError,
    Environment,
    EpisodeRecord,
    Status,
    StoreError,
    TaskSet,
)
from envlab.rollout.episode import EpisodeConfig, episode_ids_in_group, group_id, run_episode
from envlab.rollout.progress import RolloutProgress
from envlab.rollout.store import TrajectoryStore

RUN_FILE = "run.json"
TRAJECTORIES_FILE = "trajectories.jsonl"


class RunInfo(BaseModel):
    """``run.json``: everything needed to know what was run, and to resume it."""

    command: list[str]
    envlab_version: str
    env_id: str
    env_hash: str
    env_config: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSpec
    seed: int
    samples: int
    n_tasks: int
    task_set_hash: str
    task_ids: list[str]
    concurrency: int
    episode_config: dict[str, Any]
    created_at: float
    resumed_at: list[float] = Field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        """The fields a resumed run must share with the original."""
        return {
            "env_id": self.env_id,
            "env_hash": self.env_hash,
            "agent": self.agent.model_dump(),
            "seed": self.seed,
            "samples": self.samples,
            "task_set_hash": self.task_set_hash,
        }


@dataclass(slots=True)
class RolloutResult:
    run_dir: Path
    info: RunInfo
    records: list[EpisodeRecord]
    """One light record per episode of the run (earlier ones too, when resumed); the full
    trajectories are in ``trajectories.jsonl`` (``TrajectoryStore(path).load()``)."""
    new_episodes: int
    skipped_episodes: int
    elapsed_s: float
    notes: list[str] = field(default_factory=list)


def load_run_info(run_dir: Path) -> RunInfo:
    path = run_dir / RUN_FILE
    try:
        return RunInfo.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise StoreError(f"{run_dir} is not a run directory: {RUN_FILE} is missing") from None
    except ValueError as e:
        raise StoreError(f"{path} is corrupt ({str(e)[:200]}); it cannot be resumed") from None


async def rollout(
    env: Environment,
    agent: Agent,
    tasks: TaskSet,
    *,
    out_dir: str | Path,
    samples: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    resume: bool = False,
    env_id: str | None = None,
    episode_config: EpisodeConfig | None = None,
    progress: bool = True,
    pass_threshold: float = 1.0,
    command: list[str] | None = None,
) -> RolloutResult:
    """Run ``tasks x samples`` episodes into ``out_dir``; with ``resume``, only the missing ones."""
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {samples}")
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    if len(tasks) == 0:
        raise ConfigError("the task set is empty; ask for at least one task (--tasks N)")
    cfg = episode_config or EpisodeConfig()
    run_dir = Path(out_dir)
    if agent.privileged != agent.spec.privileged:
        raise ConfigError(
            f"agent {agent.spec.name!r}: its class says privileged={agent.privileged} but its "
            f"spec says {agent.spec.privileged}; they must agree, so that results of agents that "
            "read hidden answers are never reported as skill"
        )
    env_id = env_id or env.id or type(env).__name__
    env_hash = env.content_hash()
    spec = agent.spec
    info = RunInfo(
        command=command if command is not None else list(sys.argv),
        envlab_version=__version__,
        env_id=env_id,
        env_hash=env_hash,
        env_config=json.loads(json.dumps(env.config, default=str)),
        agent=spec,
        seed=seed,
        samples=samples,
        n_tasks=len(tasks),
        task_set_hash=tasks.content_hash(),
        task_ids=[t.id for t in tasks],
        concurrency=concurrency,
        episode_config=asdict(cfg),
        created_at=time.time(),
    )
    store = TrajectoryStore(run_dir / TRAJECTORIES_FILE)
    existing: list[EpisodeRecord] = []
    notes: list[str] = []
    run_file = run_dir / RUN_FILE
    if run_file.exists() or store.path.exists():
        if not resume:
            raise ConfigError(
                f"{run_dir} already holds a run. "
                "Pass --resume to finish it, or choose another --out."
            )
        old = load_run_info(run_dir)
        diff = {
            k: (v, info.identity()[k]) for k, v in old.identity().items() if info.identity()[k] != v
        }
        if diff:
            fields = ", ".join(sorted(diff))
            raise ConfigError(
                f"cannot resume {run_dir}: this command differs from the recorded run in {fields}. "
                "Resume with the same environment, agent, seed, tasks and samples, "
                "or use a new --out."
            )
        info.created_at, info.resumed_at = old.created_at, [*old.resumed_at, time.time()]
        info.command = old.command
        existing = [t.record() for t in store.load(repair=True)]
        if store.dropped_torn_line is not None:
            notes.append("dropped a torn last line of trajectories.jsonl; that episode is rerun")
    run_dir.mkdir(parents=True, exist_ok=True)
    run_file.write_text(info.model_dump_json(indent=2))

    # infra errors are not the agent's: a resumed run tries those episodes again
    done_ids = {t.episode_id for t in existing if t.status != Status.INFRA_ERROR.value}
    existing = [t for t in existing if t.episode_id in done_ids]
    todo = []
    for task in tasks:
        group = group_id(env_id, env_hash, task.id, seed)
        for s in range(samples):
            ids = episode_ids_in_group(group, s)
            if ids[0] not in done_ids:
                todo.append((task, s, ids))
    total = len(tasks) * samples
    results: list[EpisodeRecord] = list(existing)
    t0 = time.perf_counter()
    work = iter(todo)

    with (
        store,
        RolloutProgress(
            total, done=total - len(todo), pass_threshold=pass_threshold, enabled=progress
        ) as bar,
    ):
        bar.seed_from(existing)

        async def worker() -> None:
            for task, s, ids in work:
                traj = await run_episode(
                    env,
                    agent,
                    task,
                    s,
                    env_id=env_id,
                    env_hash=env_hash,
                    agent_spec=spec,
                    run_seed=seed,
                    config=cfg,
                    ids=ids,
                )
                store.append(traj)
                rec = traj.record()
                results.append(rec)
                bar.update(rec)

        # a TaskGroup: if a worker fails, the others are cancelled (and close their episodes)
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, max(len(todo), 1))):
                group.create_task(worker())
    return RolloutResult(
        run_dir=run_dir,
        info=info,
        records=results,
        new_episodes=len(todo),
        skipped_episodes=total - len(todo),
        elapsed_s=time.perf_counter() - t0,
        notes=notes,
    )
