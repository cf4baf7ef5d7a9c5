"""``envlab eval``: roll out an agent in an environment and summarize the run directory."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from envlab.core import Agent, Environment, TaskSet
from envlab.measure.runs import SUMMARY_FILE
from envlab.measure.summary import Summary, summarize
from envlab.rollout import EpisodeConfig, RolloutResult, rollout


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
    must_pass: Iterable[str] | None = None,
    confidence: float = 0.95,
) -> tuple[RolloutResult, Summary]:
    """Run (or finish) the rollout, then write ``summary.json`` next to the trajectories.

    Gating tasks are those named in ``must_pass`` plus every task whose metadata says
    ``must_pass: true``; the summary reports them apart from the mean (``gate``).
    """
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
    gating = list(must_pass or []) + [t.id for t in tasks if t.metadata.get("must_pass") is True]
    summary = summarize(
        result.records,
        pass_threshold=pass_threshold,
        confidence=confidence,
        must_pass=gating or None,
    )
    (result.run_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2))
    return result, summary
