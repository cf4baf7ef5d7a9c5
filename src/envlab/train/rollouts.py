"""Where ``envlab train``'s episodes run: this process (asyncio tasks, ``concurrency`` at
once) or Ray actors (``--backend ray``: ``rollout.ray_backend.RayPool``), one planned episode
at a time through the one episode driver either way.

On Ray the learner and its checkpoints stay on the driver, and trajectories come back to it to
be recorded and learned from, exactly as locally; what goes to the workers is each policy
snapshot the loop acts with (``ship``), once per version, by value. A policy that holds its
model in this process (an ``LMLearner``'s weights, a lock) cannot go: the run is refused before
any episode, pointing at the served recipe (``envlab.train.served``), whose policy is an
endpoint the workers call. A snapshot past the staleness bound is dropped from the pool."""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import Any

from envlab.core import AgentFactory, ConfigError, EnvSpec, Task, Trajectory
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.driver import PlannedEpisode, check_backend, run_episode


class Rollouts:
    """``async with Rollouts(...) as r: traj = await r.run(planned)``."""

    def __init__(
        self,
        spec: EnvSpec,
        config: EpisodeConfig | None,
        concurrency: int,
        *,
        backend: str = "local",
        address: str | None = None,
        keep_versions: int = 2,
    ) -> None:
        check_backend(backend, address)
        self.spec, self.config, self.backend = spec, config, backend
        self.env_hash = spec.content_hash()
        self._slots = asyncio.Semaphore(concurrency)
        self._shipped: deque[AgentFactory] = deque()
        self._keep = max(keep_versions, 1)
        self._pool: Any = None
        if backend == "ray":  # Ray is imported only here
            from envlab.rollout.ray_backend import RayPool

            self._pool = RayPool(spec, config, concurrency, address)

    async def __aenter__(self) -> Rollouts:
        if self._pool is not None:
            await self._pool.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._pool is not None:
            await self._pool.__aexit__(kind, e, tb)

    async def prepare(self, tasks: list[Task]) -> None:
        """Locally, build what the tasks share before any episode (never inside a reset
        limit); on Ray each actor prepares the tasks it runs, on its own host."""
        if self._pool is None:
            await self.spec.prepare(tasks)

    def ship(self, factory: AgentFactory) -> None:
        """Make ``factory`` (a new policy snapshot) available to the workers; the one shipped
        ``keep_versions`` snapshots ago is dropped."""
        if self._pool is None:
            return
        try:
            self._pool.register(factory)
        except ConfigError as e:
            raise ConfigError(
                f"{e}. With --backend ray the learner's policy goes to every worker: a policy "
                "whose model lives in this process cannot. Serve it (envlab.train.served, "
                "docs/train-gpu.md) so the workers call its endpoint, or train with --backend "
                "local"
            ) from e
        self._shipped.append(factory)
        while len(self._shipped) > self._keep:
            self._pool.forget(self._shipped.popleft())

    async def run(self, planned: PlannedEpisode) -> Trajectory:
        if self._pool is not None:
            traj: Trajectory = await self._pool.run(planned)
            return traj
        async with self._slots:
            return await run_episode(self.spec, planned, config=self.config, env_hash=self.env_hash)
