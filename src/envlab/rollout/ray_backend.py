"""Episodes on Ray actors: the same plan, the same episode driver, other processes (or machines).

``run_episodes_on_ray`` is ``run_episodes`` with the episodes run by ``concurrency`` Ray actors.
Each actor holds its own copy of the spec and the agent factory (shipped once, by cloudpickle)
and runs one episode at a time with ``run_episode``: reset, steps, the grade after the agent is
gone, close, all on the actor, unchanged. Only what the driver decided travels there (the task,
ids and seed from the plan); the finished trajectory comes back as its JSON line and is
recorded by the driver, in the order episodes finish, exactly as the local backend records it.

A worker that dies (its process killed, its node lost) is the machinery's failure: its episode
is run again from the start on a fresh actor, each lost try counted in ``trajectory.attempts``
and within the same ``max_retries`` budget as any ``infra_error``; when every try is lost the
episode is recorded once, as ``infra_error``, and the run goes on. A worker that cannot load
the run (other code on its node: the content hash it computes differs; a missing file or
module) stops it with a ``WorkerSetupError`` (a ``ConfigError``), as does an error raised by the
episode driver itself, as it would locally. docs/ray.md has the user's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from envlab.core import (
    AgentFactory,
    ConfigError,
    EnvSpec,
    EpisodeError,
    Status,
    Trajectory,
)
from envlab.rollout import driver
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.driver import PlannedEpisode, run_episode

INSTALL_HINT = "pip install 'envlab[ray]'"
CLEANUP_TIMEOUT_S = 10.0


def import_ray() -> Any:
    """The ``ray`` module, or a ``ConfigError`` saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"--backend ray needs Ray, which is not installed: {INSTALL_HINT}") from e
    return ray


def connect(address: str | None, num_cpus: int) -> bool:
    """Join ``address`` (``auto``, ``ray://HOST:10001``, ``HOST:6379``) or, without one, start a
    local Ray instance of ``num_cpus`` CPUs; reuse a connection this process already has.
    True when this call started it (the caller then shuts it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    try:
        if address is None:
            ray.init(num_cpus=num_cpus, **opts)
        else:
            ray.init(address=address, **opts)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
        raise ConfigError(
            f"cannot connect to {where}: {type(e).__name__}: {e}. Start one with "
            "`ray start --head` and pass --address auto (on its head node) or "
            "--address ray://HOST:10001, or omit --address for a local instance"
        ) from e
    return True


def shipped(obj: object, what: str) -> bytes:
    """``obj`` pickled for the workers, or a ``ConfigError`` naming ``what`` and why not."""
    from ray import cloudpickle

    try:
        return cloudpickle.dumps(obj)
    except Exception as e:
        raise ConfigError(
            f"{what} cannot be sent to Ray workers: it does not pickle ({type(e).__name__}: "
            f"{e}). Keep live resources (locks, sockets, open files, clients) out of its "
            "constructor arguments and create them lazily, or run with --backend local"
        ) from e


class WorkerSetupError(ConfigError):
    """A worker cannot load the run's spec or agent, or computes another content hash for the
    spec: its node has other code (or lacks files). Raised on the driver; the run stops."""


_DEPLOY_HINT = (
    "Every Ray node needs the same envlab, the environment's and agent's code and any task "
    "folders at the same paths (install them there, or use a runtime_env); then run again"
)


class EpisodeWorker:
    """A Ray actor: one spec instance, the run's agent factories, one episode at a time."""

    def __init__(self, spec_blob: bytes, env_hash: str) -> None:
        self._expected = env_hash
        self._agents: dict[str, AgentFactory] = {}
        self._setup_error: str | None = None
        try:
            self._spec: EnvSpec = pickle.loads(spec_blob)
            actual = _recomputed_hash(self._spec)
        except Exception as e:
            self._setup_error = f"cannot load the environment: {type(e).__name__}: {e}"
            return
        if actual != env_hash:
            self._setup_error = (
                f"computes content hash {actual} for environment {self._spec.name!r}, the "
                f"driver {env_hash}: it runs other code or another envlab version"
            )

    def _refuse(self, problem: str) -> WorkerSetupError:
        return WorkerSetupError(
            f"the Ray worker on {socket.gethostname()} {problem}. {_DEPLOY_HINT}"
        )

    async def run(
        self, key: str, agent_blob: bytes, episode_blob: bytes, config: EpisodeConfig
    ) -> bytes:
        if self._setup_error is not None:
            raise self._refuse(self._setup_error)
        if key not in self._agents:
            try:
                self._agents[key] = pickle.loads(agent_blob)
            except Exception as e:
                raise self._refuse(f"cannot load the agent: {type(e).__name__}: {e}") from e
        task, sample_index, ids, max_retries, hooks, info = pickle.loads(episode_blob)
        planned = PlannedEpisode(
            task, sample_index, ids, self._agents[key], max_retries, hooks, info
        )
        traj = await run_episode(self._spec, planned, config=config, env_hash=self._expected)
        return traj.to_json()

    async def close(self) -> None:
        for factory in self._agents.values():
            with contextlib.suppress(Exception):
                await factory.aclose()


@dataclass(slots=True)
class _Pool:
    """The driver's side: actors by slot, what each runs, their cleanup."""

    ray: Any
    spec: EnvSpec
    cfg: EpisodeConfig
    env_hash: str
    spec_ref: Any
    agents: dict[int, tuple[str, Any]]
    actors: dict[int, Any] = field(default_factory=dict)
    retired: list[Any] = field(default_factory=list)
    in_flight: dict[int, Any] = field(default_factory=dict)

    def actor(self, slot: int) -> Any:
        if slot not in self.actors:
            remote = self.ray.remote(EpisodeWorker).options(
                max_restarts=0, max_task_retries=0, scheduling_strategy="SPREAD"
            )
            self.actors[slot] = remote.remote(self.spec_ref, self.env_hash)
        return self.actors[slot]

    def lose(self, slot: int) -> None:
        actor = self.actors.pop(slot, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)

    async def run(self, slot: int, planned: PlannedEpisode) -> Trajectory:
        """One planned episode on this slot's actor, again on a fresh one if it dies."""
        exc = self.ray.exceptions
        retries = self.cfg.max_retries if planned.max_retries is None else planned.max_retries
        key, agent_ref = self.agents[id(planned.agent)]
        lost: list[str] = []
        while True:
            p = planned
            episode = (p.task, p.sample_index, p.ids, retries - len(lost), p.hooks, p.info)
            blob = shipped(episode, f"episode {p.ids[0]} (its task, hooks and info)")
            try:
                data = await self._call(slot, key, agent_ref, blob)
                break
            except exc.RayTaskError as e:  # the driver raised on the actor: as it would here
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else e) from None
            except exc.RayError as e:  # the worker, its node or its objects are gone
                lost.append(f"{type(e).__name__}: {_headline(e)}")
                self.lose(slot)
                if len(lost) > retries:
                    return _lost(self.spec, planned, lost, self.env_hash)
                await asyncio.sleep(self.cfg.retry_backoff * 2 ** (len(lost) - 1))
        traj = Trajectory.from_json(data)
        if lost:
            traj.attempts += len(lost)
            traj.info["ray_workers_lost"] = lost
        return traj

    async def _call(self, slot: int, key: str, agent_ref: Any, blob: bytes) -> bytes:
        """The episode's JSON from this slot's actor; a cancelled wait leaves the call in
        ``in_flight`` for ``close`` to cancel on the actor."""
        ref = self.actor(slot).run.remote(key, agent_ref, blob, self.cfg)
        self.in_flight[slot] = ref
        try:
            data: bytes = await asyncio.wrap_future(ref.future())  # Ray Client's refs too
        except asyncio.CancelledError:
            raise
        except BaseException:
            self.in_flight.pop(slot, None)
            raise
        self.in_flight.pop(slot, None)
        return data

    async def close(self) -> None:
        """Cancel what still runs (its episode closes its sandbox), then end every actor."""
        for ref in self.in_flight.values():
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        actors = list(self.actors.values())
        waits = [*self.in_flight.values(), *(a.close.remote() for a in actors)]
        if waits:
            with contextlib.suppress(Exception):
                await asyncio.wait(
                    [asyncio.ensure_future(_settled(w)) for w in waits],
                    timeout=CLEANUP_TIMEOUT_S,
                )
        for actor in actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self.actors.clear()


async def run_episodes_on_ray(
    spec: EnvSpec,
    episodes: Iterable[PlannedEpisode],
    *,
    config: EpisodeConfig | None = None,
    concurrency: int = 8,
    on_trajectory: Callable[[PlannedEpisode, Trajectory], None] | None = None,
    address: str | None = None,
) -> list[Trajectory]:
    """``run_episodes`` on ``concurrency`` Ray actors (at ``address``, or a local instance).

    Returns the trajectories in plan order; ``on_trajectory`` sees each as it comes back (on
    the driver, in finishing order). If ``on_trajectory`` raises, the episodes still running
    are cancelled, their actors ended, and the error propagates."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    cfg = config or EpisodeConfig()
    plan = list(episodes)
    await driver.check_privileges(plan)
    if not plan:
        return []
    ray = import_ray()
    spec_blob = shipped(spec, f"environment {spec.name!r} ({type(spec).__qualname__})")
    factories = {id(p.agent): p.agent for p in plan}
    blobs = {
        k: shipped(f, f"agent {f.spec.name!r} ({type(f).__qualname__})")
        for k, f in factories.items()
    }
    started = connect(address, concurrency)
    try:
        pool = _Pool(
            ray,
            spec,
            cfg,
            spec.content_hash(),
            ray.put(spec_blob),
            {k: (str(i), ray.put(b)) for i, (k, b) in enumerate(blobs.items())},
        )
        try:
            return await _drive(pool, plan, concurrency, on_trajectory)
        finally:
            await asyncio.shield(pool.close())
    finally:
        if started:
            ray.shutdown()


async def _drive(
    pool: _Pool,
    plan: list[PlannedEpisode],
    concurrency: int,
    on_trajectory: Callable[[PlannedEpisode, Trajectory], None] | None,
) -> list[Trajectory]:
    results: list[Trajectory | None] = [None] * len(plan)
    work = iter(enumerate(plan))

    async def slot(n: int) -> None:
        for i, planned in work:
            traj = await pool.run(n, planned)
            results[i] = traj
            driver.notify_watchers(traj)  # the driver's watchers see it here
            if on_trajectory is not None:
                on_trajectory(planned, traj)

    try:
        async with asyncio.TaskGroup() as group:
            for n in range(min(concurrency, len(plan))):
                group.create_task(slot(n))
    except BaseExceptionGroup as eg:
        raise driver.first_cause(eg) from eg
    return [t for t in results if t is not None]


def _lost(spec: EnvSpec, planned: PlannedEpisode, lost: list[str], env_hash: str) -> Trajectory:
    """The record of an episode whose every try lost its Ray worker: ``infra_error``."""
    episode_id, group, seed = planned.ids
    message = (
        f"the Ray worker running this episode died on each of its {len(lost)} tries (last: "
        f"{lost[-1]}). The machinery failed, not the agent; if the episode itself kills its "
        "worker (memory), run it with --backend local to see the error"
    )
    return Trajectory(
        episode_id=episode_id,
        task_id=planned.task.id,
        group_id=group,
        sample_index=planned.sample_index,
        reward=None,
        status=Status.INFRA_ERROR,
        env_id=spec.name,
        env_hash=env_hash,
        seed=seed,
        agent=planned.agent.spec,
        attempts=len(lost),
        error=EpisodeError(kind="infra", phase="engine", message=message),
        info={**planned.info, "ray_workers_lost": lost},
    )


def _recomputed_hash(spec: EnvSpec) -> str:
    """The content hash of ``spec`` as this process's code computes it: the hash a spec caches
    (``EnvSpec.content_hash``) came pickled from the driver, so it is dropped first, in the
    specs a wrapped spec holds too."""
    seen: set[int] = set()
    todo: list[EnvSpec] = [spec]
    while todo:
        s = todo.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        attrs = getattr(s, "__dict__", {})
        attrs.pop("_content_hash", None)
        todo.extend(v for v in attrs.values() if isinstance(v, EnvSpec))
    return spec.content_hash()


def _headline(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


async def _settled(ref: Any) -> None:
    with contextlib.suppress(BaseException):
        await ref
