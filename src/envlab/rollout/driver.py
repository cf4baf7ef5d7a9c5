"""The one episode driver: a plan of episodes in, trajectories out. ``eval``, ``vet``,
``robustness`` and ``task run|check`` all run their episodes here, in this process
(``backend="local"``) or on Ray actors (``backend="ray"``, ``rollout.ray_backend``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from envlab.core import AgentFactory, ConfigError, EnvSpec, Status, Task, Trajectory
from envlab.rollout.config import EpisodeConfig, EpisodeHooks
from envlab.rollout.episode import Attempt

BACKENDS = ("local", "ray")
"""Where a plan's episodes run: asyncio tasks of this process, or Ray actors."""


def check_backend(backend: str, address: str | None) -> None:
    """``--backend``/``--address`` checked before anything runs (Ray is not imported here)."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if address is not None and backend != "ray":
        raise ConfigError("--address names a Ray cluster; it needs --backend ray")


@contextlib.contextmanager
def backend_session(backend: str, address: str | None, num_cpus: int) -> Iterator[None]:
    """One connection to Ray for a whole command (``vet`` runs several plans, ``robustness``
    one per perturbation): joined or started here, ended here if this call started it, so
    each plan inside reuses it instead of paying Ray's start-up again. Local: nothing."""
    check_backend(backend, address)
    if backend != "ray":
        yield
        return
    from envlab.rollout import ray_backend

    started = ray_backend.connect(address, num_cpus)
    try:
        yield
    finally:
        if started:
            ray_backend.import_ray().shutdown()


def group_id(env_id: str, env_hash: str, task_id: str, run_seed: int) -> str:
    """The id shared by every sample of one task in one run (a GRPO group)."""
    key = f"{env_id}\0{env_hash}\0{task_id}\0{run_seed}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


def episode_ids_in_group(group: str, sample: int) -> tuple[str, str, int]:
    """``(episode_id, group_id, seed)`` of sample ``sample`` of a group; deterministic."""
    seed = (int(group[8:16], 16) ^ (sample * 0x9E3779B1)) & 0xFFFFFFFF
    return f"{group}-{sample}", group, seed


def episode_ids(
    env_id: str, env_hash: str, task_id: str, run_seed: int, sample: int
) -> tuple[str, str, int]:
    """Deterministic ``(episode_id, group_id, seed)``: the same run gives the same ids on resume."""
    return episode_ids_in_group(group_id(env_id, env_hash, task_id, run_seed), sample)


@dataclass(frozen=True, slots=True)
class PlannedEpisode:
    """One episode of a plan: which task, which sample, which agent, its ids and extras."""

    task: Task
    sample_index: int
    ids: tuple[str, str, int]
    """``(episode_id, group_id, seed)``."""
    agent: AgentFactory
    max_retries: int | None = None
    """Retries after ``infra_error``; ``None``: the run's ``EpisodeConfig.max_retries``."""
    hooks: EpisodeHooks | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """Copied into ``trajectory.info`` (e.g. vet's ``{"probe": "oracle"}``)."""


_watchers: list[Callable[[Trajectory], None]] = []


def notify_watchers(traj: Trajectory) -> None:
    """Show a finished episode to every ``watch`` callback (a backend that runs episodes
    elsewhere calls this when one comes back)."""
    for callback in tuple(_watchers):
        callback(traj)


@contextlib.contextmanager
def watch(callback: Callable[[Trajectory], None]) -> Iterator[None]:
    """Call ``callback(trajectory)`` for every episode the driver finishes meanwhile."""
    _watchers.append(callback)
    try:
        yield
    finally:
        _watchers.remove(callback)


async def run_episode(
    spec: EnvSpec,
    planned: PlannedEpisode,
    *,
    config: EpisodeConfig | None = None,
    env_hash: str | None = None,
) -> Trajectory:
    """Run one planned episode; retry it on ``infra_error``; fill in its ids and identity."""
    cfg = config or EpisodeConfig()
    task = planned.task
    episode_id, group, seed = planned.ids
    agent_spec = planned.agent.spec
    limits = cfg.overrides.over(spec.limits(task))
    retries = cfg.max_retries if planned.max_retries is None else planned.max_retries
    attempt = 0
    while True:
        attempt += 1
        traj = await Attempt(
            spec, planned.agent.new_agent, agent_spec, task, seed, limits, cfg, planned.hooks
        ).run()
        if traj.status is not Status.INFRA_ERROR or attempt > retries:
            break
        await asyncio.sleep(cfg.retry_backoff * 2 ** (attempt - 1))
    traj.episode_id, traj.group_id, traj.sample_index = episode_id, group, planned.sample_index
    traj.env_id, traj.env_hash = spec.name, env_hash or spec.content_hash()
    traj.attempts = attempt
    if planned.info:
        traj.info.update(planned.info)
    notify_watchers(traj)
    return traj


async def run_episodes(
    spec: EnvSpec,
    episodes: Iterable[PlannedEpisode],
    *,
    config: EpisodeConfig | None = None,
    concurrency: int = 8,
    on_trajectory: Callable[[PlannedEpisode, Trajectory], None] | None = None,
    collect: bool = True,
    backend: str = "local",
    address: str | None = None,
) -> list[Trajectory]:
    """Run ``episodes`` on ``concurrency`` workers; ``on_trajectory`` sees each as it ends.

    Returns the trajectories in plan order; with ``collect=False``, none (a caller that keeps
    what it needs in ``on_trajectory``, as ``rollout`` does, holds no run in memory). If
    ``on_trajectory`` raises (a full disk), the other episodes are cancelled, close what they
    hold, and the error propagates. ``backend="ray"``: the same, on ``concurrency`` Ray actors
    (at ``address``, else the connection this process has, else a local instance)."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    check_backend(backend, address)
    plan = list(episodes)
    if backend == "ray":  # Ray is imported only here: a local run never loads it
        from envlab.rollout.ray_backend import run_episodes_on_ray

        return await run_episodes_on_ray(
            spec, plan, config=config, concurrency=concurrency, on_trajectory=on_trajectory,
            address=address, collect=collect,
        )  # fmt: skip
    await check_privileges(plan)
    # what the episodes share (images, workspaces) is built now, never inside a reset limit
    await spec.prepare(list({p.task.id: p.task for p in plan}.values()))
    env_hash = spec.content_hash()
    results: list[Trajectory | None] = [None] * len(plan) if collect else []
    work = iter(enumerate(plan))

    async def worker() -> None:
        for i, planned in work:
            traj = await run_episode(spec, planned, config=config, env_hash=env_hash)
            if collect:
                results[i] = traj
            if on_trajectory is not None:
                on_trajectory(planned, traj)

    try:
        with frozen_heap():
            async with asyncio.TaskGroup() as group:
                for _ in range(min(concurrency, max(len(plan), 1))):
                    group.create_task(worker())
    except BaseExceptionGroup as eg:
        raise first_cause(eg) from eg
    return [t for t in results if t is not None]


_freezes = 0
_freeze_lock = threading.Lock()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Exempt what exists before the episodes (modules, specs, tasks, a model's weights) from
    the collector's full passes while they run.

    A full collection walks every tracked object; with torch or a tokenizer imported that is
    millions, tens of milliseconds per pass, and the episodes' short-lived objects trigger one
    every couple of thousand episodes (``bench/overhead.py``). Nested and concurrent runs (other
    threads too) share one freeze; the last to finish gives the objects back to the collector."""
    global _freezes
    with _freeze_lock:
        if _freezes == 0:
            gc.freeze()
        _freezes += 1
    try:
        yield
    finally:
        with _freeze_lock:
            _freezes -= 1
            if _freezes == 0:
                gc.unfreeze()


async def check_privileges(plan: list[PlannedEpisode]) -> None:
    """An agent that reads hidden answers must say so in its spec, so that its results are
    never reported as skill."""
    for factory in {id(p.agent): p.agent for p in plan}.values():
        agent = factory.new_agent()
        await agent.close()
        if agent.privileged != factory.spec.privileged:
            raise ConfigError(
                f"agent {factory.spec.name!r}: its class says privileged={agent.privileged} but "
                f"its spec says {factory.spec.privileged}; they must agree, so that results of "
                "agents that read hidden answers are never reported as skill"
            )


def first_cause(eg: BaseExceptionGroup) -> BaseException:
    """The error that stopped the workers (a full disk, say), not the group wrapping it."""
    for e in eg.exceptions:
        if isinstance(e, BaseExceptionGroup):
            return first_cause(e)
        if not isinstance(e, asyncio.CancelledError):
            return e
    return eg
