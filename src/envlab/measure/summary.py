"""Summaries of a run: rewards, pass@k, pass^k, counts by status."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, Field

from envlab.core import EpisodeRecord, Status, Trajectory
from envlab.measure.estimators import pass_at_k, pass_hat_k


class TaskStats(BaseModel):
    task_id: str
    n: int
    passed: int
    mean_reward: float | None


class Summary(BaseModel):
    """``summary.json``: what a run measured. Infra and environment errors are excluded from
    scores and counted; timeouts and agent errors count as failures."""

    n_tasks: int
    n_episodes: int
    n_scored: int
    status_counts: dict[str, int]
    mean_reward: float | None
    pass_rate: float | None
    pass_threshold: float
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    pass_hat_k: dict[int, float] = Field(default_factory=dict)
    tool_errors: int = 0
    mean_steps: float | None = None
    tasks: list[TaskStats] = Field(default_factory=list)


def is_pass(reward: float | None, threshold: float) -> bool:
    return reward is not None and reward >= threshold - 1e-9


def summarize(
    episodes: Iterable[Trajectory | EpisodeRecord], *, pass_threshold: float = 1.0
) -> Summary:
    """Summarize trajectories, or the light ``EpisodeRecord`` of each (what a rollout keeps)."""
    trajs = [t.record() if isinstance(t, Trajectory) else t for t in episodes]
    counts = Counter(t.status for t in trajs)
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for t in trajs:
        by_task[t.task_id].append(t)
    scored = [t for t in trajs if t.scored]
    rewards = [t.reward for t in scored if t.reward is not None]
    tasks: list[TaskStats] = []
    for task_id, ts in by_task.items():
        s = [t for t in ts if t.scored]
        tasks.append(
            TaskStats(
                task_id=task_id,
                n=len(s),
                passed=sum(is_pass(t.reward, pass_threshold) for t in s),
                mean_reward=sum(t.reward or 0.0 for t in s) / len(s) if s else None,
            )
        )
    max_n = max((t.n for t in tasks), default=0)
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    for k in range(1, max_n + 1):
        eligible = [t for t in tasks if t.n >= k]
        if not eligible:
            continue
        at_k[k] = sum(pass_at_k(t.n, t.passed, k) for t in eligible) / len(eligible)
        hat_k[k] = sum(pass_hat_k(t.n, t.passed, k) for t in eligible) / len(eligible)
    return Summary(
        n_tasks=len(by_task),
        n_episodes=len(trajs),
        n_scored=len(scored),
        status_counts={s.value: counts.get(s.value, 0) for s in Status},
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_rate=(
            sum(is_pass(r, pass_threshold) for r in rewards) / len(rewards) if rewards else None
        ),
        pass_threshold=pass_threshold,
        pass_at_k=at_k,
        pass_hat_k=hat_k,
        tool_errors=sum(t.tool_errors for t in trajs),
        mean_steps=sum(t.n_steps for t in scored) / len(scored) if scored else None,
        tasks=sorted(tasks, key=lambda t: t.task_id),
    )
