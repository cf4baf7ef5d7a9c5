"""Power analysis: how small a difference an eval can see, and how many tasks or samples it needs.

Miller, "Adding Error Bars to Evals" (2024), section on power. For a paired comparison of two
agents on n tasks with K samples per task, the variance of the mean paired difference is

    Var(d̄) = (ω² + σ²/K) / n

where ω² (``between``) is the variance across tasks of the true per-task difference and σ²
(``within``) is the sum of the two agents' within-task sample variances. A two-sided test at
level α with power 1-β detects differences of at least

    MDD = (z_{1-α/2} + z_{1-β}) · sqrt((ω² + σ²/K) / n).

Sampling a task more often (larger K) shrinks only the σ²/K part; only more tasks shrink ω².
For a single run, ``between`` is the variance of the true task means and the same formulas
give the smallest difference from a fixed reference that the run can detect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VarianceComponents:
    """``between``: variance of true task means (or paired differences) across tasks;
    ``within``: within-task variance of one sample (summed over both runs when paired)."""

    between: float
    within: float

    def per_task(self, k: float) -> float:
        """Variance of one task's mean over ``k`` samples."""
        return self.between + self.within / k


def _z_sum(alpha: float, power: float) -> float:
    from scipy import stats

    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1 (e.g. 0.05), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be between 0 and 1 (e.g. 0.8), got {power}")
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def _check_var(var: VarianceComponents) -> None:
    if var.between < 0 or var.within < 0:
        raise ValueError(f"variances must be >= 0, got {var}")


def minimum_detectable_difference(
    n: int,
    var: VarianceComponents,
    *,
    k: float = 1,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest true difference detected with probability ``power`` by a two-sided test at
    level ``alpha`` on ``n`` tasks with ``k`` samples each."""
    if n < 1 or k < 1:
        raise ValueError(f"need n >= 1 tasks and k >= 1 samples, got n={n}, k={k}")
    _check_var(var)
    return _z_sum(alpha, power) * math.sqrt(var.per_task(k) / n)


def tasks_needed(
    delta: float,
    var: VarianceComponents,
    *,
    k: float = 1,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int:
    """Tasks needed to detect a true difference of ``delta`` with ``k`` samples per task."""
    if delta <= 0:
        raise ValueError(f"the target difference must be > 0, got {delta}")
    if k < 1:
        raise ValueError(f"need k >= 1 samples per task, got {k}")
    _check_var(var)
    return max(1, math.ceil(_z_sum(alpha, power) ** 2 * var.per_task(k) / delta**2 - 1e-9))


def samples_needed(
    delta: float,
    n: int,
    var: VarianceComponents,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """Samples per task needed to detect ``delta`` on ``n`` tasks; ``None`` when no number of
    samples can: the spread between tasks alone (``between``) is too large, so only more tasks
    help."""
    if delta <= 0:
        raise ValueError(f"the target difference must be > 0, got {delta}")
    if n < 1:
        raise ValueError(f"need n >= 1 tasks, got n={n}")
    _check_var(var)
    budget = n * delta**2 / _z_sum(alpha, power) ** 2  # the largest per-task variance allowed
    if var.between >= budget:
        return None
    if var.within == 0:
        return 1
    return max(1, math.ceil(var.within / (budget - var.between) - 1e-9))


def variance_components(groups: Mapping[str, Sequence[float]]) -> VarianceComponents:
    """Estimate ``between`` and ``within`` from the samples of each task of one run.

    ``within`` is the mean of the per-task sample variances (tasks with 2+ samples; 0 if none
    has), ``between`` the variance of the task means less ``within / K`` (K the mean number of
    samples per task), floored at 0: the method-of-moments estimate of one-way ANOVA.
    """
    import numpy as np

    values = [np.asarray(v, dtype=float) for v in groups.values() if len(v) > 0]
    if len(values) < 2:
        raise ValueError("need at least 2 tasks with a scored sample to estimate variances")
    multi = [v for v in values if v.size >= 2]
    within = float(np.mean([v.var(ddof=1) for v in multi])) if multi else 0.0
    means = np.array([v.mean() for v in values])
    k = float(np.mean([v.size for v in values]))
    between = max(float(means.var(ddof=1)) - within / k, 0.0)
    return VarianceComponents(between=between, within=within)


def paired_variance_components(
    a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]]
) -> VarianceComponents:
    """Variance components of the paired difference B - A over the tasks both runs scored."""
    import numpy as np

    shared = [t for t in a if t in b and len(a[t]) > 0 and len(b[t]) > 0]
    if len(shared) < 2:
        raise ValueError("need at least 2 shared tasks to estimate variances")
    va = [np.asarray(a[t], dtype=float) for t in shared]
    vb = [np.asarray(b[t], dtype=float) for t in shared]
    d = np.array([y.mean() - x.mean() for x, y in zip(va, vb, strict=True)])

    def within(vs: list[np.ndarray]) -> tuple[float, float]:
        multi = [v.var(ddof=1) for v in vs if v.size >= 2]
        return (float(np.mean(multi)) if multi else 0.0), float(np.mean([v.size for v in vs]))

    (wa, ka), (wb, kb) = within(va), within(vb)
    between = max(float(d.var(ddof=1)) - wa / ka - wb / kb, 0.0)
    # ``within`` is per sample, with K shared by both runs: σ²/K = wa/ka + wb/kb at the current K
    k = (ka + kb) / 2
    return VarianceComponents(between=between, within=(wa / ka + wb / kb) * k)
