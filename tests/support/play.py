"""Run one episode through the engine's driver, for tests: ``await play(spec, agent, ...)``."""

from __future__ import annotations

from typing import Any

from envlab.core import Agent, AgentFactory, EnvSpec, Limits, Task, Trajectory
from envlab.rollout import EpisodeConfig, EpisodeHooks, PlannedEpisode, episode_ids, run_episode
from tests.support.envs import EchoEnv, EchoEpisode, Given


async def play(
    spec: EnvSpec,
    agent: Agent | AgentFactory,
    task: Task | None = None,
    *,
    sample: int = 0,
    run_seed: int = 0,
    hooks: EpisodeHooks | None = None,
    max_retries: int = 0,
    wait_timeout: float | None = 3600.0,
    model_failures: str = "agent",
    **limits: Any,
) -> Trajectory:
    """One episode of ``task`` (default: the spec's first) by ``agent`` (an agent object is
    used as it is: one episode's worth), with ``limits`` (``Limits`` fields, ``None`` = no
    limit) over the spec's own."""
    task = task or spec.tasks(n=1)[0]
    factory = agent if isinstance(agent, AgentFactory) else Given(agent)
    ids = episode_ids(spec.name, spec.content_hash(), task.id, run_seed, sample)
    config = EpisodeConfig(
        overrides=Limits(**limits) if limits else Limits.overrides(),
        max_retries=max_retries,
        retry_backoff=0.0,
        wait_timeout=wait_timeout,
        model_failures=model_failures,  # type: ignore[arg-type]
    )
    planned = PlannedEpisode(task, sample, ids, factory, hooks=hooks)
    return await run_episode(spec, planned, config=config)


def echo_with(episode: type[EchoEpisode]) -> EchoEnv:
    """``EchoEnv`` whose episodes are ``episode`` (a test's subclass of ``EchoEpisode``)."""
    return type(f"EchoWith{episode.__name__}", (EchoEnv,), {"environment": episode})()


def hash_in_subprocess(imports: str, spec: str, *, hash_seed: int) -> str:
    """``content_hash()`` of the spec expression ``spec`` computed in a fresh Python process
    (``PYTHONHASHSEED=hash_seed``, so that set orders and object addresses differ from ours)."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    env = {**subprocess_env(), "PYTHONHASHSEED": str(hash_seed)}
    code = f"{imports}\nprint(({spec}).content_hash())"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()
