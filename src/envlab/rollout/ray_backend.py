"""Episodes on Ray actors: the same plan, the same episode driver, other processes (or machines).

``RayPool`` is ``concurrency`` Ray actors (``ray_worker.EpisodeWorker``) that each run one
planned episode at a time with ``run_episode``: the task's preparation, reset, steps, the grade
after the agent is gone, close, all on the actor, unchanged. Each actor holds its own copy of
the spec (shipped once, by cloudpickle) and of each agent factory it was sent. Only what the
driver decided travels there (the task, ids and seed from the plan); the finished trajectory
comes back as its JSON line and is recorded by the driver, in the order episodes finish,
exactly as the local backend records it. ``run_episodes_on_ray`` is ``run_episodes`` over a
pool; ``envlab train`` sends its episodes one by one (``RayPool.run``).

A worker that dies (its process killed, its node lost) is the machinery's failure: its episode
is run again from the start on a fresh actor, each lost try counted in ``trajectory.attempts``
and named in ``info["ray_workers_lost"]``, up to ``EpisodeConfig.max_worker_losses`` times (a
budget apart from ``max_retries``: a lost try left no trajectory, so vet's probes, which are
never retried, survive it too); past it the episode is recorded once, as ``infra_error``, and
the run goes on. A worker that cannot load the run (other code on its node: the content hash
it computes differs; a missing file or module) stops it with a ``WorkerSetupError`` (a
``ConfigError``), as does an error raised by the episode driver itself, as it would locally.
docs/ray.md has the user's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable
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
from envlab.rollout.driver import PlannedEpisode
from envlab.rollout.ray_worker import EpisodeWorker

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


class RayPool:
    """``concurrency`` Ray actors running planned episodes of ``spec``, one each at a time:
    ``async with RayPool(...) as pool: traj = await pool.run(planned)``. Joins ``address`` (or
    the connection this process has, or starts a local instance, shut down on exit)."""

    def __init__(
        self,
        spec: EnvSpec,
        config: EpisodeConfig | None = None,
        concurrency: int = 8,
        address: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
        self.spec, self.cfg, self.concurrency, self.address = (
            spec, config or EpisodeConfig(), concurrency, address
        )  # fmt: skip
        self.ray: Any = None
        self._blob = shipped(spec, f"environment {spec.name!r} ({type(spec).__qualname__})")
        self._started = False
        self._agents: dict[int, tuple[str, Any, AgentFactory]] = {}
        self._keys = itertools.count()  # never reused: an actor caches factories by key
        self._actors: dict[int, Any] = {}
        self._in_flight: dict[int, Any] = {}
        self._free: asyncio.Queue[int] = asyncio.Queue()

    async def __aenter__(self) -> RayPool:
        self.ray = import_ray()
        self._started = connect(self.address, self.concurrency)
        self.env_hash = self.spec.content_hash()
        self._spec_ref = self.ray.put(self._blob)
        for slot in range(self.concurrency):
            self._free.put_nowait(slot)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await asyncio.shield(self._close())
        finally:
            if self._started:
                self.ray.shutdown()

    def register(self, factory: AgentFactory) -> None:
        """Ship ``factory`` to the object store once (a ``ConfigError`` if it cannot go)."""
        if id(factory) not in self._agents:
            what = f"agent {factory.spec.name!r} ({type(factory).__qualname__})"
            ref = self.ray.put(shipped(factory, what))
            self._agents[id(factory)] = (str(next(self._keys)), ref, factory)

    def forget(self, factory: AgentFactory) -> None:
        """Drop the driver's copy of a factory no episode will use again (a past policy)."""
        self._agents.pop(id(factory), None)

    async def run(self, planned: PlannedEpisode) -> Trajectory:
        """``planned`` on a free actor; again on a fresh one if its worker dies."""
        self.register(planned.agent)
        slot = await self._free.get()
        try:
            traj = await self._run(slot, planned)
        finally:
            self._free.put_nowait(slot)
        driver.notify_watchers(traj)  # the driver's watchers see it here
        return traj

    def _actor(self, slot: int) -> Any:
        if slot not in self._actors:
            remote = self.ray.remote(EpisodeWorker).options(
                max_restarts=0, max_task_retries=0, scheduling_strategy="SPREAD"
            )
            self._actors[slot] = remote.remote(self._spec_ref, self.env_hash)
        return self._actors[slot]

    def _lose(self, slot: int) -> None:
        actor = self._actors.pop(slot, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)

    async def _run(self, slot: int, planned: PlannedEpisode) -> Trajectory:
        exc = self.ray.exceptions
        p = planned
        episode = (p.task, p.sample_index, p.ids, p.max_retries, p.hooks, p.info)
        blob = shipped(episode, f"episode {p.ids[0]} (its task, hooks and info)")
        lost: list[str] = []
        by_machinery = True  # every loss so far was the cluster's (a node, an actor unstarted)
        while True:
            try:
                data = await self._call(slot, p.agent, blob)
                break
            except exc.RayTaskError as e:  # the driver raised on the actor: as it would here
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else e) from None
            except exc.RayError as e:  # the worker, its node or its objects are gone
                lost.append(f"{type(e).__name__}: {_headline(e)}")
                by_machinery = by_machinery and _cluster_loss(e, exc)
                self._lose(slot)
                if len(lost) > self.cfg.max_worker_losses:
                    return _lost(self.spec, planned, lost, self.env_hash, by_machinery)
                await asyncio.sleep(self.cfg.retry_backoff * 2 ** (len(lost) - 1))
        traj = Trajectory.from_json(data)
        if lost:
            traj.attempts += len(lost)
            traj.info["ray_workers_lost"] = lost
        return traj

    async def _call(self, slot: int, agent: AgentFactory, blob: bytes) -> bytes:
        """The episode's JSON from this slot's actor; a cancelled wait leaves the call in
        ``in_flight`` for ``close`` to cancel on the actor."""
        key, agent_ref, _ = self._agents[id(agent)]
        ref = self._actor(slot).run.remote(key, agent_ref, blob, self.cfg)
        self._in_flight[slot] = ref
        try:
            data: bytes = await asyncio.wrap_future(ref.future())  # Ray Client's refs too
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._in_flight.pop(slot, None)
            raise
        self._in_flight.pop(slot, None)
        return data

    async def _close(self) -> None:
        """Cancel what still runs (its episode closes its sandbox), then end every actor."""
        for ref in self._in_flight.values():
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        actors = list(self._actors.values())
        waits = [*self._in_flight.values(), *(a.close.remote() for a in actors)]
        if waits:
            with contextlib.suppress(Exception):
                await asyncio.wait(
                    [asyncio.ensure_future(_settled(w)) for w in waits],
                    timeout=CLEANUP_TIMEOUT_S,
                )
        for actor in actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor, no_restart=True)
        self._actors.clear()


async def run_episodes_on_ray(
    spec: EnvSpec,
    episodes: Iterable[PlannedEpisode],
    *,
    config: EpisodeConfig | None = None,
    concurrency: int = 8,
    on_trajectory: Callable[[PlannedEpisode, Trajectory], None] | None = None,
    address: str | None = None,
    collect: bool = True,
) -> list[Trajectory]:
    """``run_episodes`` on ``concurrency`` Ray actors (at ``address``, or a local instance).

    Returns the trajectories in plan order (none with ``collect=False``); ``on_trajectory``
    sees each as it comes back (on the driver, in finishing order). If ``on_trajectory``
    raises, the episodes still running are cancelled, their actors ended, and the error
    propagates."""
    pool = RayPool(spec, config, concurrency, address)
    plan = list(episodes)
    await driver.check_privileges(plan)
    if not plan:
        return []
    for factory in {id(p.agent): p.agent for p in plan}.values():  # unpicklable: before Ray
        shipped(factory, f"agent {factory.spec.name!r} ({type(factory).__qualname__})")
    async with pool:
        return await _drive(pool, plan, on_trajectory, collect)


async def _drive(
    pool: RayPool,
    plan: list[PlannedEpisode],
    on_trajectory: Callable[[PlannedEpisode, Trajectory], None] | None,
    collect: bool,
) -> list[Trajectory]:
    results: list[Trajectory | None] = [None] * len(plan) if collect else []
    work = iter(enumerate(plan))

    async def slot() -> None:
        for i, planned in work:
            traj = await pool.run(planned)
            if collect:
                results[i] = traj
            if on_trajectory is not None:
                on_trajectory(planned, traj)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(pool.concurrency, len(plan))):
                group.create_task(slot())
    except BaseExceptionGroup as eg:
        raise driver.first_cause(eg) from eg
    return [t for t in results if t is not None]


def _cluster_loss(e: BaseException, exc: Any) -> bool:
    """Whether Ray lost the worker for a reason outside the episode: its node died or was
    preempted, the actor never started or failed to start (its node lacks envlab), its owner
    is gone. Not so: the worker process itself died while it ran the episode (killed, out of
    memory, a crash), which the episode's own code (the agent's harness, the environment) can
    cause."""
    if isinstance(e, exc.NodeDiedError | exc.LocalRayletDiedError | exc.OwnerDiedError):
        return True
    if getattr(e, "preempted", False) or getattr(e, "actor_init_failed", False):
        return True
    text = str(e).lower()
    return "node has died" in text or "node died" in text or "never ran" in text


def _lost(
    spec: EnvSpec, planned: PlannedEpisode, lost: list[str], env_hash: str, by_machinery: bool
) -> Trajectory:
    """The record of an episode whose every try lost its Ray worker. Lost to the cluster (a
    node, an actor that never started) on every try: ``infra_error``, the machinery's. Its
    worker *process* dying each time it runs this episode follows the episode, not the
    cluster: counted as the agent's failure (``agent_error``, reward 0), since an agent able to
    kill its worker must not escape a failing score that way (``_cluster_loss``)."""
    episode_id, group, seed = planned.ids
    n, last = len(lost), lost[-1]
    if by_machinery:
        status, reward, kind = Status.INFRA_ERROR, None, "infra"
        message = (
            f"the Ray cluster lost the worker running this episode on each of its {n} tries "
            f"(last: {last}). The machinery failed, not the agent; --resume runs it again"
        )
    else:
        status, reward, kind = Status.AGENT_ERROR, 0.0, "agent"
        message = (
            f"the Ray worker process running this episode died on each of its {n} tries, "
            f"with its node alive (last: {last}): the episode's own code (the agent's harness "
            "or memory; or the environment's) kills its worker, so it is scored 0 as the "
            "agent's failure, never left out. Run it with --backend local to see the error"
        )
    return Trajectory(
        episode_id=episode_id,
        task_id=planned.task.id,
        group_id=group,
        sample_index=planned.sample_index,
        reward=reward,
        status=status,
        env_id=spec.name,
        env_hash=env_hash,
        seed=seed,
        agent=planned.agent.spec,
        attempts=n,
        error=EpisodeError(kind=kind, phase="engine", message=message),
        info={**planned.info, "ray_workers_lost": lost},
    )


def _headline(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]


async def _settled(ref: Any) -> None:
    with contextlib.suppress(BaseException):
        await ref
