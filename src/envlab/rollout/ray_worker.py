"""The Ray actor of ``--backend ray``: one spec instance, the agents it was sent, one episode
at a time through the one episode driver (``run_episode``), exactly as the local backend runs
it. Imported by Ray on each worker; it imports nothing of Ray itself."""

from __future__ import annotations

import contextlib
import pickle
import socket
from collections import OrderedDict

from envlab.core import AgentFactory, ConfigError, EnvSpec, Task
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.driver import PlannedEpisode, run_episode

KEPT_AGENTS = 8
"""Agent factories an actor keeps (``train`` sends one per policy version; older ones, past any
staleness bound, are closed and sent again if ever asked for)."""

_DEPLOY_HINT = (
    "Every Ray node needs the same envlab, the environment's and agent's code and any task "
    "folders at the same paths (install them there, or use a runtime_env); then run again"
)


class WorkerSetupError(ConfigError):
    """A worker cannot load the run's spec or agent, or computes another content hash for the
    spec: its node has other code (or lacks files). Raised on the driver; the run stops."""


class EpisodeWorker:
    """A Ray actor: one spec instance, the run's agent factories, one episode at a time.

    Before the first episode of each task it runs ``spec.prepare([task])`` (a task folder's
    image and verifier, by content hash: built once per host, under a file lock its other
    actors wait on), outside every limit, as the local backend prepares before its first
    episode. A task this host cannot prepare is left for its episodes to report, on this host,
    as the machinery's or the environment's failure (``infra_error``/``env_error``, the host
    named in ``info["ray_host"]``), never as the agent's."""

    def __init__(self, spec_blob: bytes, env_hash: str) -> None:
        self._expected = env_hash
        self._agents: OrderedDict[str, AgentFactory] = OrderedDict()
        self._prepared: set[str] = set()
        self._setup_error: str | None = None
        try:
            self._spec: EnvSpec = pickle.loads(spec_blob)
            actual = recomputed_hash(self._spec)
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

    async def _agent(self, key: str, agent_blob: bytes) -> AgentFactory:
        if key in self._agents:
            self._agents.move_to_end(key)
            return self._agents[key]
        try:
            factory: AgentFactory = pickle.loads(agent_blob)
        except Exception as e:
            raise self._refuse(f"cannot load the agent: {type(e).__name__}: {e}") from e
        self._agents[key] = factory
        while len(self._agents) > KEPT_AGENTS:
            _, old = self._agents.popitem(last=False)
            with contextlib.suppress(Exception):
                await old.aclose()
        return factory

    async def _prepare(self, task: Task) -> None:
        if task.id not in self._prepared:
            self._prepared.add(task.id)
            await self._spec.prepare([task])

    async def run(
        self, key: str, agent_blob: bytes, episode_blob: bytes, config: EpisodeConfig
    ) -> bytes:
        if self._setup_error is not None:
            raise self._refuse(self._setup_error)
        agent = await self._agent(key, agent_blob)
        task, sample_index, ids, max_retries, hooks, info = pickle.loads(episode_blob)
        await self._prepare(task)
        planned = PlannedEpisode(task, sample_index, ids, agent, max_retries, hooks, info)
        traj = await run_episode(self._spec, planned, config=config, env_hash=self._expected)
        if not traj.scored:
            traj.info["ray_host"] = socket.gethostname()
        return traj.to_json()

    async def close(self) -> None:
        for factory in self._agents.values():
            with contextlib.suppress(Exception):
                await factory.aclose()


def recomputed_hash(spec: EnvSpec) -> str:
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
