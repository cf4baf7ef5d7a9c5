"""envlab from Python, as the CLI runs it: ``envlab.evaluate``, ``envlab.vet_env`` and
``envlab.run_tour`` (not ``vet``/``tour``: those are envlab's subpackages, and an imported
subpackage is what ``envlab.vet`` means).

Each takes names (as ``envlab eval`` does: ``"calc"``, ``"oracle"``, ``"module:attr"``, a task
folder path) or the objects themselves (an ``EnvSpec``, an ``AgentFactory``), runs to the end
and returns the result the CLI prints; an agent opened here by name is closed here. From
inside a running event loop, await the coroutines they wrap instead
(``envlab.cli.evaluate.evaluate``, ``envlab.vet.runner.vet_environment``,
``envlab.tour.run.run_tour``)::

    import envlab

    ev = envlab.evaluate("calc", "oracle", tasks=5, out="runs/calc-oracle")
    ev.summary.mean_reward  # 1.0
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envlab.cli.evaluate import Evaluation
    from envlab.core import AgentFactory, EnvSpec
    from envlab.tour.run import TourResult
    from envlab.vet.model import EnvVet


def _spec(env: str | EnvSpec, env_args: Mapping[str, Any] | None) -> EnvSpec:
    from envlab.cli.options import open_env
    from envlab.core import ConfigError

    if isinstance(env, str):
        return open_env(env, dict(env_args or {}))
    if env_args:
        raise ConfigError("env_args configure an environment given by name; got an EnvSpec")
    return env


def _agent(agent: str | AgentFactory, agent_args: Mapping[str, Any] | None) -> AgentFactory:
    from envlab.cli.options import open_agent
    from envlab.core import ConfigError

    if isinstance(agent, str):
        return open_agent(agent, dict(agent_args or {}))
    if agent_args:
        raise ConfigError("agent_args configure an agent given by name; got an AgentFactory")
    return agent


def _out(out: str | Path | None, kind: str, *names: str) -> Path:
    from envlab.cli.run_dirs import default_out_dir

    return Path(out) if out is not None else default_out_dir(kind, *names)


def evaluate(
    env: str | EnvSpec,
    agent: str | AgentFactory,
    *,
    tasks: int | None = None,
    samples: int = 1,
    out: str | Path | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent_args: Mapping[str, Any] | None = None,
    split: str = "test",
    seed: int = 0,
    concurrency: int = 8,
    resume: bool = False,
    **options: Any,
) -> Evaluation:
    """``envlab eval ENV --agent AGENT``: the run directory is written as the CLI writes it;
    ``options`` go to ``envlab.cli.evaluate.evaluate`` (``config``, ``pass_threshold``, ...)."""
    spec = _spec(env, env_args)
    factory = _agent(agent, agent_args)
    task_set = spec.tasks(seed=seed, n=tasks, split=split)
    name = agent if isinstance(agent, str) else type(factory).__name__
    run_dir = _out(out, "", spec.name, name)

    async def run() -> Evaluation:
        from envlab.cli.evaluate import evaluate as evaluate_async

        try:
            return await evaluate_async(
                spec, factory, task_set, out_dir=run_dir, samples=samples,
                concurrency=concurrency, seed=seed, resume=resume, **options,
            )  # fmt: skip
        finally:
            if isinstance(agent, str):
                await factory.aclose()

    return asyncio.run(run())


def vet_env(
    env: str | EnvSpec,
    *,
    agent: str | AgentFactory | None = None,
    out: str | Path | None = None,
    env_args: Mapping[str, Any] | None = None,
    agent_args: Mapping[str, Any] | None = None,
    tasks: int | None = None,
    oracle_runs: int = 5,
    concurrency: int = 2,
) -> EnvVet:
    """``envlab vet ENV``: every check on every task, ``vet.json`` written to ``out``;
    ``agent`` (optional) is the real agent of the trainability check."""
    from envlab.vet.runner import VetConfig, vet_environment

    spec = _spec(env, env_args)
    factory = None if agent is None else _agent(agent, agent_args)
    config = VetConfig(oracle_runs=oracle_runs, concurrency=concurrency, tasks=tasks)

    async def run() -> EnvVet:
        try:
            return await vet_environment(
                spec, out_dir=_out(out, "vet", spec.name), agent=factory, config=config
            )
        finally:
            if factory is not None and isinstance(agent, str):
                await factory.aclose()

    return asyncio.run(run())


def run_tour(out: str | Path | None = None, *, model: bool = True) -> TourResult:
    """``envlab tour``: vet, train, measure, report, into ``out`` (a new directory)."""
    from envlab.tour.run import TourConfig
    from envlab.tour.run import run_tour as run_tour_async

    return asyncio.run(run_tour_async(TourConfig(_out(out, "tour"), model=model)))
