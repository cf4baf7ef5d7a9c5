"""Many episodes: tasks x samples, grouped by task, concurrent, recorded in a run directory."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from envlab import __version__
from envlab.core import (
    AgentFactory,
    AgentSpec,
    ConfigError,
    EnvSpec,
    EpisodeRecord,
    Status,
    TaskSet,
    Trajectory,
)
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.driver import (
    PlannedEpisode,
    check_backend,
    episode_ids_in_group,
    frozen_heap,
    group_id,
    run_episodes,
)
from envlab.runs import (
    RUN_FILE,
    TRAJECTORIES_FILE,
    RunInfo,
    TrajectoryStore,
    load_run_info,
    write_run_info,
)

"""Where a run's episodes run: this process (asyncio tasks) or Ray actors."""


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


class RunObserver(Protocol):
    """Sees a run's progress (the CLI draws a bar with it; the engine draws nothing)."""

    def started(self, total: int, existing: list[EpisodeRecord]) -> None: ...

    def finished(self, record: EpisodeRecord) -> None: ...


async def rollout(
    spec: EnvSpec,
    agent: AgentFactory,
    tasks: TaskSet,
    *,
    out_dir: str | Path,
    samples: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    resume: bool = False,
    config: EpisodeConfig | None = None,
    observer: RunObserver | None = None,
    command: list[str] | None = None,
    backend: str = "local",
    ray_address: str | None = None,
) -> RolloutResult:
    """Run ``tasks x samples`` episodes into ``out_dir``; with ``resume``, only the missing ones.

    ``backend="ray"`` runs the episodes on Ray actors (``rollout.ray_backend``; at
    ``ray_address``, else a local instance): the same plan, records and resume.

    The run directory is locked for the whole run: a second writer (two ``--resume`` at once)
    is refused with a ``StoreError`` naming this process's pid. The caller that made ``agent``
    closes it (``await agent.aclose()``)."""
    if samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {samples}")
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    if len(tasks) == 0:
        raise ConfigError("the task set is empty; ask for at least one task (--tasks N)")
    check_backend(backend, ray_address)
    cfg = config or EpisodeConfig()
    run_dir = Path(out_dir)
    info = _run_info(spec, agent.spec, tasks, seed, samples, concurrency, cfg, command)
    with frozen_heap():  # the plan and the episodes: what exists now is not garbage
        store = TrajectoryStore(run_dir / TRAJECTORIES_FILE)
        store.lock()  # before reading anything: what we read stays true until we are done
        try:
            existing, notes = _resume_state(run_dir, info, store, resume)
            write_run_info(run_dir, info)
            # infra errors are not the agent's: a resumed run tries those episodes again
            done_ids = {t.episode_id for t in existing if t.status != Status.INFRA_ERROR.value}
            existing = [t for t in existing if t.episode_id in done_ids]
            todo = _plan(tasks, samples, info, agent, done_ids, spec.seed_hash())
            total = len(tasks) * samples
            if observer is not None:
                observer.started(total, existing)
            records: list[EpisodeRecord] = []

            def keep(planned: PlannedEpisode, traj: Trajectory) -> None:
                store.append(traj)
                rec = traj.record()
                records.append(rec)
                if observer is not None:
                    observer.finished(rec)

            t0 = time.perf_counter()
            with store:
                await run_episodes(
                    spec, todo, config=cfg, concurrency=concurrency, on_trajectory=keep,
                    collect=False, backend=backend, address=ray_address,
                )  # fmt: skip
        finally:
            store.close()
    return RolloutResult(
        run_dir=run_dir,
        info=info,
        records=[*existing, *records],
        new_episodes=len(todo),
        skipped_episodes=total - len(todo),
        elapsed_s=time.perf_counter() - t0,
        notes=notes,
    )


def _plan(
    tasks: TaskSet,
    samples: int,
    info: RunInfo,
    agent: AgentFactory,
    done: set[str],
    seed_hash: str,
) -> list[PlannedEpisode]:
    """The episodes still to run, in task order, with their deterministic ids (from the spec's
    ``seed_hash``: a perturbed run's are its clean run's)."""
    todo = []
    for task in tasks:
        group = group_id(info.env_id, seed_hash, task.id, info.seed)
        for s in range(samples):
            ids = episode_ids_in_group(group, s)
            if ids[0] not in done:
                todo.append(PlannedEpisode(task, s, ids, agent))
    return todo


def _run_info(
    env: EnvSpec,
    spec: AgentSpec,
    tasks: TaskSet,
    seed: int,
    samples: int,
    concurrency: int,
    cfg: EpisodeConfig,
    command: list[str] | None,
) -> RunInfo:
    return RunInfo(
        command=command if command is not None else list(sys.argv),
        envlab_version=__version__,
        env_id=env.name,
        env_hash=env.content_hash(),
        env_config=env.config.model_dump(mode="json"),
        agent=spec,
        seed=seed,
        samples=samples,
        n_tasks=len(tasks),
        task_set_hash=tasks.content_hash(),
        task_ids=[t.id for t in tasks],
        concurrency=concurrency,
        episode_config=cfg.describe(),
        created_at=time.time(),
    )


def _resume_state(
    run_dir: Path, info: RunInfo, store: TrajectoryStore, resume: bool
) -> tuple[list[EpisodeRecord], list[str]]:
    """The episodes already recorded in ``run_dir`` (after checking it may be resumed by this
    command, and repairing a torn or unterminated last line), and notes about it."""
    notes: list[str] = []
    if not ((run_dir / RUN_FILE).exists() or store.path.exists()):
        return [], notes
    if not resume:
        raise ConfigError(
            f"{run_dir} already holds a run. Pass --resume to finish it, or choose another --out."
        )
    old = load_run_info(run_dir)
    new_id = info.identity()
    diff = sorted(k for k, v in old.identity().items() if new_id[k] != v)
    if diff:
        raise ConfigError(
            f"cannot resume {run_dir}: this command differs from the recorded run in "
            f"{', '.join(diff)}. Resume with the same environment, agent, seed, tasks and "
            "samples (and --model-failures), or use a new --out."
        )
    info.created_at, info.resumed_at = old.created_at, [*old.resumed_at, time.time()]
    info.command = old.command
    existing = [t.record() for t in store.load(repair=True)]
    if store.dropped_torn_line is not None:
        notes.append(f"dropped a torn last line of {TRAJECTORIES_FILE}; that episode is rerun")
    if store.repaired_newline:
        notes.append(f"the last record of {TRAJECTORIES_FILE} lacked its newline; added it")
    return existing, notes
