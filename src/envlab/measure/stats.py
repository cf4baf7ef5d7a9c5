"""Means with honest error bars: CLT, cluster-robust by task, bootstrap, binomial intervals.

Following Miller, "Adding Error Bars to Evals" (2024): the tasks of an eval are a sample from a
population of tasks, so a score is an estimate with a standard error. When a task is sampled
several times its samples are correlated, and the standard error must be clustered by task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import numpy as np

Dist = Literal["t", "z"]


class Estimate(BaseModel):
    """A mean with its standard error and a confidence interval.

    ``se``, ``low`` and ``high`` are ``None`` when the data cannot estimate them (one task).
    """

    model_config = ConfigDict(frozen=True)

    value: float
    se: float | None
    low: float | None
    high: float | None
    confidence: float = 0.95
    n: int
    """Observations (episodes)."""
    clusters: int
    """Independent units (tasks): what the uncertainty is counted in."""
    method: str
    """``t``/``z`` (one observation per unit), ``clustered-t``/``clustered-z`` (several per task,
    cluster-robust), ``wilson``/``exact`` (binomial), ``bootstrap`` (resampling tasks)."""

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1 (e.g. 0.95), got {confidence}")


def critical_value(confidence: float, df: float | None = None) -> float:
    """Two-sided critical value: Student's t with ``df`` degrees of freedom, normal if ``None``
    (the standard library's: scipy, slow to import, only for t)."""
    _check_confidence(confidence)
    q = 1.0 - (1.0 - confidence) / 2.0
    if df is None:
        from statistics import NormalDist

        return NormalDist().inv_cdf(q)
    from scipy import stats

    return float(stats.t.ppf(q, df))


def _cluster_codes(clusters: Sequence[object] | None, n: int) -> tuple[np.ndarray, int]:
    import numpy as np

    if clusters is None:
        return np.arange(n), n
    if len(clusters) != n:
        raise ValueError(f"got {n} values but {len(clusters)} cluster labels; give one per value")
    _, codes = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    return codes, int(codes.max()) + 1 if n else 0


def mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    clusters: Sequence[object] | None = None,
    confidence: float = 0.95,
    dist: Dist = "t",
) -> Estimate:
    """Mean of ``values`` with a confidence interval.

    Without ``clusters`` every value is independent: ``se = s / sqrt(n)`` (the CLT interval).
    With ``clusters`` (the task of each value) the standard error is cluster-robust,
    ``se² = G/(G-1) · Σ_c (Σ_{i∈c} (x_i - x̄))² / n²`` over G clusters: Miller's clustered
    standard error with the usual small-sample factor G/(G-1). It equals the plain interval when
    every cluster holds one value, and the interval of the task means when every task holds the
    same number of values. ``dist="t"`` uses Student's t with G-1 degrees of freedom (the
    default; it tends to the normal as G grows), ``"z"`` the normal.
    """
    import numpy as np

    _check_confidence(confidence)
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        raise ValueError("cannot estimate the mean of no values")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite numbers (a missing reward is not a zero)")
    codes, g = _cluster_codes(clusters, n)
    mean = float(x.mean())
    clustered = g < n
    method = ("clustered-" if clustered else "") + dist
    if g < 2:
        return Estimate(
            value=mean, se=None, low=None, high=None, confidence=confidence, n=n, clusters=g,
            method=method,
        )  # fmt: skip
    sums = np.bincount(codes, weights=x - mean, minlength=g)
    var = g / (g - 1) * float(np.sum(sums**2)) / n**2
    se = float(np.sqrt(max(var, 0.0)))
    crit = critical_value(confidence, g - 1 if dist == "t" else None)
    return Estimate(
        value=mean,
        se=se,
        low=mean - crit * se,
        high=mean + crit * se,
        confidence=confidence,
        n=n,
        clusters=g,
        method=method,
    )


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray,
    *,
    clusters: Sequence[object] | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """Percentile bootstrap of the mean, resampling whole clusters (tasks) with replacement.

    Deterministic in ``seed``. Makes no normality assumption; prefer it for few tasks with
    skewed rewards. ``se`` is the standard deviation of the resampled means.
    """
    import numpy as np

    _check_confidence(confidence)
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be >= 100 for a usable interval, got {n_resamples}")
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        raise ValueError("cannot estimate the mean of no values")
    codes, g = _cluster_codes(clusters, n)
    mean = float(x.mean())
    if g < 2:
        return Estimate(
            value=mean, se=None, low=None, high=None, confidence=confidence, n=n, clusters=g,
            method="bootstrap",
        )  # fmt: skip
    sums = np.bincount(codes, weights=x, minlength=g)
    counts = np.bincount(codes, minlength=g).astype(float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, g, size=(n_resamples, g))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Estimate(
        value=mean,
        se=float(means.std(ddof=1)),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n=n,
        clusters=g,
        method="bootstrap",
    )


def proportion_ci(
    successes: int,
    n: int,
    *,
    confidence: float = 0.95,
    method: Literal["wilson", "exact"] = "wilson",
) -> Estimate:
    """Binomial interval for ``successes`` out of ``n`` independent trials.

    ``wilson`` (the score interval) stays inside [0, 1] and is not degenerate at 0 or n
    successes, where the CLT interval collapses to a point; ``exact`` is Clopper-Pearson.
    """
    _check_confidence(confidence)
    if n < 1:
        raise ValueError(f"need n >= 1 trials, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    p = successes / n
    alpha = 1.0 - confidence
    if method == "wilson":
        z = critical_value(confidence)
        denom = 1 + z**2 / n
        center = (p + z**2 / (2 * n)) / denom
        half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
        # at 0 or n successes the bound is exactly 0 or 1 (rounding would leave 1e-17)
        low = 0.0 if successes == 0 else max(0.0, center - half)
        high = 1.0 if successes == n else min(1.0, center + half)
    elif method == "exact":
        from scipy import stats

        low = (
            0.0
            if successes == 0
            else float(stats.beta.ppf(alpha / 2, successes, n - successes + 1))
        )
        high = (
            1.0
            if successes == n
            else float(stats.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
        )
    else:
        raise ValueError(f"method must be 'wilson' or 'exact', got {method!r}")
    return Estimate(
        value=p,
        se=math.sqrt(p * (1 - p) / n),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n=n,
        clusters=n,
        method=method,
    )
