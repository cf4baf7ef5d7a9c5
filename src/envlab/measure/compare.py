"""``envlab compare``: two runs of one environment, paired task by task, with a verdict."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from envlab.core import ConfigError
from envlab.measure.paired import McNemar, PairedDifference, mcnemar, paired_difference
from envlab.measure.power import (
    VarianceComponents,
    minimum_detectable_difference,
    paired_variance_components,
    samples_needed,
    tasks_needed,
)
from envlab.measure.runs import Run, load_run
from envlab.measure.summary import is_binary, is_pass

if TYPE_CHECKING:
    import numpy as np


class RunRef(BaseModel):
    path: str
    agent: str
    privileged: bool
    env_id: str
    env_hash: str
    n_tasks: int
    samples: float
    """Mean scored samples per shared task."""
    mean: float
    """Mean of the task means over the shared tasks."""


class Comparison(BaseModel):
    """Paired comparison of run B against run A on the tasks both scored; ``diff = B - A``."""

    a: RunRef
    b: RunRef
    confidence: float
    power: float
    n_shared: int
    n_only_a: int
    n_only_b: int
    n_unscored: int
    """Tasks in both runs left out because one run has no scored sample of them."""
    scale: float
    """100 when rewards lie in [0, 1] (differences in points), else 1."""
    unit: str
    paired: PairedDifference
    """In reward units (multiply by ``scale`` for points)."""
    mcnemar: McNemar | None = None
    """McNemar's exact test, for binary rewards with one sample per task in each run."""
    test: str
    p_value: float | None
    significant: bool | None
    min_detectable: float | None = None
    """Smallest true difference this comparison detects with ``power`` (reward units)."""
    target: float | None = None
    tasks_needed: int | None = None
    """Shared tasks needed to detect ``target`` with ``power``, at the current samples per task."""
    more_tasks_needed: int | None = None
    samples_needed: int | None = None
    """Samples per task needed to detect ``target`` on the current tasks; None when no number
    of samples suffices, or when no task was sampled twice in both runs (unknown)."""
    variance: dict[str, float] | None = None
    verdict: str
    notes: list[str] = Field(default_factory=list)


def _task_means(by_task: dict[str, list[float]], tasks: list[str]) -> np.ndarray:
    import numpy as np

    return np.array([sum(by_task[t]) / len(by_task[t]) for t in tasks])


def _ref(run: Run, by_task: dict[str, list[float]], shared: list[str], means: np.ndarray) -> RunRef:
    return RunRef(
        path=str(run.path),
        agent=run.info.agent.name,
        privileged=run.info.agent.privileged,
        env_id=run.info.env_id,
        env_hash=run.info.env_hash,
        n_tasks=len({r.task_id for r in run.records}),
        samples=sum(len(by_task[t]) for t in shared) / len(shared),
        mean=float(means.mean()),
    )


def compare_runs(
    run_a: str | Path | Run,
    run_b: str | Path | Run,
    *,
    confidence: float = 0.95,
    power: float = 0.8,
    target: float | None = None,
    force: bool = False,
) -> Comparison:
    """Compare B against A on their shared tasks (``target`` in reward units, e.g. 0.03).

    Refuses runs that share no tasks, and runs of different environment content (their scores
    measure different things) unless ``force``.
    """
    a = run_a if isinstance(run_a, Run) else load_run(run_a)
    b = run_b if isinstance(run_b, Run) else load_run(run_b)
    notes = [*a.notes, *b.notes]
    if a.info.env_hash != b.info.env_hash:
        what = (
            f"environment content differs: {a.path} ran {a.info.env_id} (hash {a.info.env_hash}), "
            f"{b.path} ran {b.info.env_id} (hash {b.info.env_hash})"
        )
        if not force:
            raise ConfigError(
                f"cannot compare: the {what}, so their scores measure different things. Run both "
                "agents on the same environment version, or pass --force to compare anyway."
            )
        notes.append(f"forced: the {what}")
    tasks_a = {r.task_id for r in a.records}
    tasks_b = {r.task_id for r in b.records}
    common = sorted(tasks_a & tasks_b)
    if not common:
        raise ConfigError(
            f"cannot compare: {a.path} and {b.path} share no tasks "
            f"({len(tasks_a)} and {len(tasks_b)} tasks, e.g. {min(tasks_a)} and {min(tasks_b)}). "
            "Evaluate both on the same task set (same environment, --seed, --split and --tasks)."
        )
    ra, rb = a.rewards_by_task(), b.rewards_by_task()
    shared = [t for t in common if t in ra and t in rb]
    if not shared:
        raise ConfigError(
            f"cannot compare: none of the {len(common)} shared tasks has a scored episode in both "
            "runs (only infra/environment errors). Rerun them with `envlab eval ... --resume`."
        )
    if a.pass_threshold != b.pass_threshold:
        notes.append(f"pass thresholds differ ({a.pass_threshold} vs {b.pass_threshold})")
    for label, run in (("A", a), ("B", b)):
        if run.info.episode_config.get("model_failures") == "exclude":
            failed = sum(r.model_failed for r in run.records)
            notes.append(
                f"{label} excluded its model failures (--model-failures exclude: {failed} "
                "episodes not scored): its score is over the episodes its endpoint answered"
            )
        if run.info.agent.privileged:
            notes.append(
                f"{label} ({run.info.agent.name}) read hidden answers: a check of the "
                "environment, not a measure of skill"
            )
    xa, xb = _task_means(ra, shared), _task_means(rb, shared)
    paired = paired_difference(xa, xb, confidence=confidence)
    all_rewards = [v for t in shared for v in (*ra[t], *rb[t])]
    in_unit = all(0.0 <= v <= 1.0 for v in all_rewards)
    if in_unit and paired.low is not None and paired.high is not None:
        # a difference of rewards in [0, 1] lies in [-1, 1]; so does its interval
        paired = paired.model_copy(
            update={"low": max(paired.low, -1.0), "high": min(paired.high, 1.0)}
        )
    scale, unit = (100.0, "points") if in_unit else (1.0, "")
    mc = None
    if is_binary(all_rewards) and all(len(ra[t]) == 1 and len(rb[t]) == 1 for t in shared):
        mc = mcnemar(
            [is_pass(ra[t][0], a.pass_threshold) for t in shared],
            [is_pass(rb[t][0], b.pass_threshold) for t in shared],
        )
    test, p = ("McNemar exact", mc.p_value) if mc else ("paired t", paired.p_value)
    alpha = 1 - confidence
    cmp = Comparison(
        a=_ref(a, ra, shared, xa),
        b=_ref(b, rb, shared, xb),
        confidence=confidence,
        power=power,
        n_shared=len(shared),
        n_only_a=len(tasks_a - tasks_b),
        n_only_b=len(tasks_b - tasks_a),
        n_unscored=len(common) - len(shared),
        scale=scale,
        unit=unit,
        paired=paired,
        mcnemar=mc,
        test=test,
        p_value=p,
        significant=None if p is None else p < alpha,
        verdict="",
        notes=notes,
    )
    if paired.sd_diff is not None:
        _add_power(cmp, ra, rb, shared, alpha, target)
    return cmp.model_copy(update={"verdict": verdict(cmp)})


def _add_power(
    cmp: Comparison,
    ra: dict[str, list[float]],
    rb: dict[str, list[float]],
    shared: list[str],
    alpha: float,
    target: float | None,
) -> None:
    sd = cmp.paired.sd_diff or 0.0
    observed = VarianceComponents(between=sd**2, within=0.0)  # at the current samples per task
    n = cmp.n_shared
    cmp.min_detectable = minimum_detectable_difference(n, observed, alpha=alpha, power=cmp.power)
    if target is None and not cmp.significant:
        # what it would take to confirm the difference seen, or half the detectable one
        shown = max(abs(cmp.paired.diff), cmp.min_detectable / 2) * cmp.scale
        target = max(round(shown, 1), 0.1) / cmp.scale
    if target is None:
        return
    if target <= 0:
        raise ConfigError(f"--target must be > 0 {cmp.unit}, got {target * cmp.scale:g}")
    cmp.target = target
    cmp.tasks_needed = tasks_needed(target, observed, alpha=alpha, power=cmp.power)
    cmp.more_tasks_needed = max(0, cmp.tasks_needed - n)
    cmp.variance = {"paired_task_var": sd**2}
    if any(len(ra[t]) > 1 and len(rb[t]) > 1 for t in shared):
        # within-task variance is seen only with several samples of a task: only then can
        # more samples per task be weighed against more tasks
        var = paired_variance_components({t: ra[t] for t in shared}, {t: rb[t] for t in shared})
        cmp.variance.update(between=var.between, within=var.within)
        cmp.samples_needed = samples_needed(target, n, var, alpha=alpha, power=cmp.power)


def _num(x: float, cmp: Comparison) -> str:
    v = x * cmp.scale
    return f"{v:.1f}" if cmp.unit == "points" else f"{v:.3g}"


def _units(x: float, cmp: Comparison) -> str:
    return f"{_num(x, cmp)} {cmp.unit}".rstrip()


def verdict(cmp: Comparison) -> str:
    """One plain sentence: who is better by how much, or what it would take to tell."""
    p = cmp.paired
    pct = f"{cmp.confidence * 100:g}%"
    if p.low is None or p.high is None or cmp.p_value is None:
        return (
            f"one shared task: B - A = {_units(p.diff, cmp)}, but one task cannot estimate "
            "uncertainty; evaluate both runs on more tasks"
        )
    if cmp.significant and p.diff != 0:
        if p.diff > 0:
            better, low, high = "B", p.low, p.high
        else:
            better, low, high = "A", -p.high, -p.low
        return (
            f"{better} is better by {_units(abs(p.diff), cmp)}, {pct} CI {_num(low, cmp)} to "
            f"{_num(high, cmp)} (p = {_p(cmp.p_value)}, {cmp.test}, {cmp.n_shared} tasks)"
        )
    text = (
        f"no detectable difference (B - A = {'+' if p.diff >= 0 else ''}{_units(p.diff, cmp)}, "
        f"{pct} CI {_num(p.low, cmp)} to {_num(p.high, cmp)}, p = {_p(cmp.p_value)})"
    )
    if p.sd_diff == 0:
        return text + f"; the runs scored the same on all {cmp.n_shared} shared tasks"
    if cmp.target is not None and cmp.more_tasks_needed is not None:
        if cmp.more_tasks_needed > 0:
            text += (
                f"; {cmp.more_tasks_needed} more tasks needed to detect {_units(cmp.target, cmp)}"
            )
        else:
            text += (
                f"; {cmp.n_shared} tasks could detect {_units(cmp.target, cmp)} with "
                f"{cmp.power:.0%} power, so a real difference is likely smaller"
            )
    return text


def _p(p: float) -> str:
    if p < 1e-4:
        return f"{p:.1e}"
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


__all__ = ["Comparison", "RunRef", "compare_runs", "verdict"]
