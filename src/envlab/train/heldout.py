"""The comparison a user needs after training: the trained policy and its baselines on the
same held-out tasks and seeds, each a run directory of its own (``envlab compare`` and
``envlab report`` read them), with confidence intervals and the fraction of the best
achievable when an exact optimum is among them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from envlab.core import AgentFactory, ConfigError, EnvSpec, TaskSet
from envlab.measure.runs import Run, load_run
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.runner import rollout


class HeldoutRow(BaseModel):
    name: str
    agent: str
    run_dir: str
    n_tasks: int
    n_scored: int
    n_excluded: int
    mean: float | None
    low: float | None
    high: float | None
    fraction_of_best: float | None = None
    fraction_low: float | None = None
    fraction_high: float | None = None
    gap_closed: float | None = None
    """``(mean - floor) / (best - floor)``: how much of the way from the floor (the random
    policy) to the best achievable this policy went."""


class PairedRow(BaseModel):
    a: str
    b: str
    diff: float | None
    low: float | None
    high: float | None
    p_value: float | None
    verdict: str


class Heldout(BaseModel):
    split: str
    seed: int
    confidence: float
    best: str | None
    """The row whose mean is the best achievable (an exact optimum), if any."""
    rows: list[HeldoutRow]
    paired: list[PairedRow]


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    factory: AgentFactory
    best: bool = False
    """Its mean on these tasks is the best achievable (the environment's exact optimum)."""
    floor: bool = False
    """The level to improve on (the uniform random policy)."""


async def evaluate_heldout(
    spec: EnvSpec,
    tasks: TaskSet,
    contenders: list[Contender],
    out_dir: Path,
    *,
    split: str,
    seed: int = 0,
    concurrency: int = 32,
    confidence: float = 0.95,
    config: EpisodeConfig | None = None,
    backend: str = "local",
    address: str | None = None,
) -> Heldout:
    """Run each contender once per task into ``out_dir/<name>`` (resumable; on ``backend``),
    then compare."""
    runs = {}
    for c in contenders:
        result = await rollout(
            spec, c.factory, tasks, out_dir=out_dir / c.name, seed=seed, resume=True,
            concurrency=concurrency, config=config, command=["envlab", "train", "(held-out)"],
            backend=backend, ray_address=address,
        )  # fmt: skip
        runs[c.name] = load_run(result.run_dir)
    best = next((c.name for c in contenders if c.best), None)
    rows = [_row(c, runs[c.name], confidence) for c in contenders]
    if best is not None:
        floor = next((c.name for c in contenders if c.floor), None)
        _relative(rows, {n: _task_means(r) for n, r in runs.items()}, best, floor)
    first = contenders[0].name
    paired = [_paired(runs[c.name], runs[first], confidence) for c in contenders[1:]]
    return Heldout(
        split=split, seed=seed, confidence=confidence, best=best, rows=rows, paired=paired
    )


def _row(c: Contender, run: Run, confidence: float) -> HeldoutRow:
    s = run.summarize(confidence=confidence)
    ci = s.mean_reward_ci
    return HeldoutRow(
        name=c.name,
        agent=c.factory.spec.model_id or c.factory.spec.name,
        run_dir=str(run.path),
        n_tasks=s.n_tasks,
        n_scored=s.n_scored,
        n_excluded=s.n_excluded,
        mean=s.mean_reward,
        low=None if ci is None else ci.low,
        high=None if ci is None else ci.high,
    )


def _task_means(run: Run) -> dict[str, float]:
    return {t: sum(v) / len(v) for t, v in run.rewards_by_task().items()}


def _relative(
    rows: list[HeldoutRow], means: dict[str, dict[str, float]], best: str, floor: str | None
) -> None:
    """Each policy's mean over the optimum's, and the share of the way from the floor to the
    optimum it went, both over the tasks every one of them was scored on (an excluded episode
    leaves its task out of every term, never of one side only). The fraction's interval is the
    mean's interval scaled by the optimum's mean, when the policy was scored on every task."""
    names = [best] if floor is None else [best, floor]
    for r in rows:
        shared = set(means[r.name]).intersection(*(means[n] for n in names))
        if not shared:
            continue

        def mean(name: str, tasks: set[str] = shared) -> float:
            return sum(means[name][t] for t in tasks) / len(tasks)

        top = mean(best)
        if top > 1e-12:
            r.fraction_of_best = mean(r.name) / top
            if r.name != best and r.low is not None and r.high is not None and not r.n_excluded:
                r.fraction_low, r.fraction_high = r.low / top, r.high / top
        if floor is not None and top - mean(floor) > 1e-12:
            r.gap_closed = (mean(r.name) - mean(floor)) / (top - mean(floor))


def _paired(a_run: Run, b_run: Run, confidence: float) -> PairedRow:
    """``b - a`` paired over the shared tasks (``envlab compare A B``)."""
    from envlab.measure.compare import compare_runs

    try:
        cmp = compare_runs(a_run, b_run, confidence=confidence)
    except ConfigError as e:  # no shared scored task: say so, keep the other rows
        return PairedRow(
            a=a_run.path.name, b=b_run.path.name, diff=None, low=None, high=None,
            p_value=None, verdict=str(e),
        )  # fmt: skip
    p = cmp.paired
    return PairedRow(
        a=Path(cmp.a.path).name, b=Path(cmp.b.path).name, diff=p.diff, low=p.low,
        high=p.high, p_value=cmp.p_value, verdict=cmp.verdict,
    )  # fmt: skip
