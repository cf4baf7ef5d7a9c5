"""``envlab eval``: roll out an agent in an environment and summarize the run directory."""

from __future__ import annotations

from pathlib import Path

from envlab.core import Agent, Environment, TaskSet
from envlab.measure.summary import Summary, summarize
from envlab.rollout import EpisodeConfig, RolloutResult, rollout

SUMMARY_FILE = "summary.json"


async def evaluate(
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
) -> tuple[RolloutResult, Summary]:
    """Run (or finish) the rollout, then write ``summary.json`` next to the trajectories."""
    result = await rollout(
        env,
        agent,
        tasks,
        out_dir=out_dir,
        samples=samples,
        concurrency=concurrency,
        seed=seed,
        resume=resume,
        env_id=env_id,
        episode_config=episode_config,
        progress=progress,
        pass_threshold=pass_threshold,
        command=command,
    )
    summary = summarize(result.records, pass_threshold=pass_threshold)
    (result.run_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2))
    return result, summary
