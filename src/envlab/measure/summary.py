"""Summaries of a run: rewards with confidence intervals, pass@k, pass^k, counts by status."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from envlab.core import EpisodeRecord, Status, Trajectory
from envlab.measure.estimators import pass_at_k, pass_hat_k
from envlab.measure.gate import GateResult, evaluate_gate
from envlab.measure.stats import Estimate, bootstrap_mean_ci, mean_ci, proportion_ci

CIMethod = Literal["clt", "bootstrap"]


class TaskStats(BaseModel):
    task_id: str
    n: int
    """Scored samples."""
    passed: int
    mean_reward: float | None
    success_rate: float | None = None
    """``passed / n``: the task's pass rate."""
    excluded: int = 0
    """Samples excluded from scores (``infra_error``, ``env_error``)."""


class Summary(BaseModel):
    """``summary.json``: what a run measured. Infra and environment errors are excluded from
    scores and counted; timeouts and agent errors count as failures.

    Every ``*_ci`` is an :class:`~envlab.measure.stats.Estimate` at ``confidence``, counted in
    tasks: clustered by task when tasks have several samples (Miller 2024).
    """

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
    # added with confidence intervals; older summary.json files load with the defaults
    confidence: float = 0.95
    ci_method: str = "clt"
    n_excluded: int = 0
    """Episodes excluded from scores (``infra_error`` + ``env_error``)."""
    n_grader_failed: int = 0
    """Scored episodes whose grade was invalid twice (scored 0, never excluded)."""
    n_model_failed: int = 0
    """Episodes whose agent's model endpoint failed past its retries (error kind ``model``):
    scored 0 as the agent's failures, or excluded when ``model_failures`` is ``exclude``."""
    model_failures: str = "agent"
    """Whose failure the agent's model endpoint failing was in this run (``agent``: scored 0;
    ``exclude``: a run on a trusted endpoint that excluded them)."""
    samples_per_task: int = 0
    """The largest number of scored samples of one task."""
    mean_reward_ci: Estimate | None = None
    pass_rate_ci: Estimate | None = None
    pass_at_k_ci: dict[int, Estimate] = Field(default_factory=dict)
    pass_hat_k_ci: dict[int, Estimate] = Field(default_factory=dict)
    gate: GateResult | None = None


PASS_TOLERANCE = 1e-9
"""A reward this close below the threshold passes (1 - 1e-12 from a float sum is a 1)."""


def is_pass(reward: float | None, threshold: float = 1.0) -> bool:
    """THE pass test of envlab: a reward passes when it reaches ``threshold`` (within
    ``PASS_TOLERANCE``); no reward (an unscored episode) never passes. Summaries, compare,
    vet and the CLI's progress all judge passes with this one function."""
    return reward is not None and reward >= threshold - PASS_TOLERANCE


def is_binary(values: Iterable[float]) -> bool:
    return all(v == 0.0 or v == 1.0 for v in values)


def rate_ci(
    values: Sequence[float],
    clusters: Sequence[str],
    *,
    confidence: float = 0.95,
    method: CIMethod = "clt",
) -> Estimate:
    """CI of a mean of 0/1 outcomes (or of per-task rates), clustered by task.

    With one value per task it is the Wilson interval. When the outcome never varies (0 of n,
    n of n) the CLT interval collapses to a point; the Wilson interval counted in tasks is used
    instead, so a run that passed every task still reports how little 50 tasks can prove.
    """
    n_clusters = len(set(clusters))
    binary = is_binary(values)
    if binary and n_clusters == len(values):
        return proportion_ci(int(sum(values)), len(values), confidence=confidence)
    est = _mean_ci(values, clusters, confidence, method)
    if est.se == 0 and len(set(values)) == 1 and values[0] in (0.0, 1.0):
        w = proportion_ci(int(values[0]) * n_clusters, n_clusters, confidence=confidence)
        return w.model_copy(update={"n": len(values)})
    return est


def _mean_ci(
    values: Sequence[float], clusters: Sequence[str], confidence: float, method: CIMethod
) -> Estimate:
    if method == "bootstrap":
        est = bootstrap_mean_ci(values, clusters=clusters, confidence=confidence)
    else:
        est = mean_ci(values, clusters=clusters, confidence=confidence)
    if est.low is not None and est.high is not None and all(0.0 <= v <= 1.0 for v in values):
        # the mean of rewards in [0, 1] lies in [0, 1]; so does its interval
        est = est.model_copy(update={"low": max(est.low, 0.0), "high": min(est.high, 1.0)})
    return est


def summarize(
    episodes: Iterable[Trajectory | EpisodeRecord],
    *,
    pass_threshold: float = 1.0,
    confidence: float = 0.95,
    ci_method: CIMethod = "clt",
    must_pass: Iterable[str] | None = None,
    model_failures: str = "agent",
) -> Summary:
    """Summarize trajectories, or the light ``EpisodeRecord`` of each (what a rollout keeps).

    ``must_pass`` names gating tasks, judged apart from the mean (:mod:`envlab.measure.gate`).
    ``model_failures`` is the run's policy (``EpisodeConfig.model_failures``), recorded.
    """
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
        passed = sum(is_pass(t.reward, pass_threshold) for t in s)
        tasks.append(
            TaskStats(
                task_id=task_id,
                n=len(s),
                passed=passed,
                mean_reward=sum(t.reward or 0.0 for t in s) / len(s) if s else None,
                success_rate=passed / len(s) if s else None,
                excluded=len(ts) - len(s),
            )
        )
    max_n = max((t.n for t in tasks), default=0)
    at_k: dict[int, float] = {}
    hat_k: dict[int, float] = {}
    at_k_ci: dict[int, Estimate] = {}
    hat_k_ci: dict[int, Estimate] = {}
    for k in range(1, max_n + 1):
        eligible = [t for t in tasks if t.n >= k]
        if not eligible:
            continue
        ids = [t.task_id for t in eligible]
        at = [pass_at_k(t.n, t.passed, k) for t in eligible]
        hat = [pass_hat_k(t.n, t.passed, k) for t in eligible]
        at_k[k] = sum(at) / len(at)
        hat_k[k] = sum(hat) / len(hat)
        at_k_ci[k] = rate_ci(at, ids, confidence=confidence, method=ci_method)
        hat_k_ci[k] = rate_ci(hat, ids, confidence=confidence, method=ci_method)
    clusters = [t.task_id for t in scored]
    passes = [float(is_pass(r, pass_threshold)) for r in rewards]
    mean_reward_ci = pass_rate_ci = None
    if rewards:
        pass_rate_ci = rate_ci(passes, clusters, confidence=confidence, method=ci_method)
        if is_binary(rewards):
            mean_reward_ci = rate_ci(rewards, clusters, confidence=confidence, method=ci_method)
        else:
            mean_reward_ci = _mean_ci(rewards, clusters, confidence, ci_method)
    gate = None
    if must_pass is not None:
        outcomes = {tid: [is_pass(t.reward, pass_threshold) for t in ts if t.scored]
                    for tid, ts in by_task.items()}  # fmt: skip
        gate = evaluate_gate(must_pass, outcomes)
    return Summary(
        n_tasks=len(by_task),
        n_episodes=len(trajs),
        n_scored=len(scored),
        status_counts={s.value: counts.get(s.value, 0) for s in Status},
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_rate=sum(passes) / len(passes) if passes else None,
        pass_threshold=pass_threshold,
        pass_at_k=at_k,
        pass_hat_k=hat_k,
        tool_errors=sum(t.tool_errors for t in trajs),
        mean_steps=sum(t.n_steps for t in scored) / len(scored) if scored else None,
        tasks=sorted(tasks, key=lambda t: t.task_id),
        confidence=confidence,
        ci_method=ci_method,
        n_excluded=len(trajs) - len(scored),
        n_grader_failed=sum(1 for t in scored if t.grader_failed),
        n_model_failed=sum(1 for t in trajs if t.model_failed),
        model_failures=model_failures,
        samples_per_task=max_n,
        mean_reward_ci=mean_reward_ci,
        pass_rate_ci=pass_rate_ci,
        pass_at_k_ci=at_k_ci,
        pass_hat_k_ci=hat_k_ci,
        gate=gate,
    )
