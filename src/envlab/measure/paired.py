"""Paired comparison of two agents on the same tasks.

Both agents face the same tasks, so task difficulty cancels out of the per-task difference
``d_i = b_i - a_i``: its variance is ``Var(a) + Var(b) - 2 Cov(a, b)``, usually far smaller than
that of two independent means (Miller 2024, "paired differences").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from envlab.measure.stats import critical_value

if TYPE_CHECKING:
    import numpy as np


class PairedDifference(BaseModel):
    """Mean of ``b - a`` over n paired tasks, with a t interval and a two-sided p-value."""

    model_config = ConfigDict(frozen=True)

    n: int
    mean_a: float
    mean_b: float
    diff: float
    """``mean_b - mean_a``."""
    se: float | None
    low: float | None
    high: float | None
    confidence: float
    p_value: float | None
    """Two-sided paired t-test of ``diff = 0``; ``None`` with one task."""
    sd_diff: float | None
    """Standard deviation of the per-task differences (the input of power analysis)."""
    correlation: float | None
    """Pearson correlation of a and b across tasks; ``None`` when either is constant."""
    se_unpaired: float | None
    """What the standard error would be if the runs were treated as independent."""


def paired_difference(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
) -> PairedDifference:
    """Paired t analysis of ``b - a``; ``a[i]`` and ``b[i]`` are scores on the same task.

    When every difference is the same (e.g. an oracle against a no-op) the standard error is 0:
    the interval is that one value and the p-value is 0 (or 1 when the difference is 0).
    """
    import numpy as np
    from scipy import stats

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.shape != xb.shape or xa.ndim != 1:
        raise ValueError(f"need two equally long lists of scores, got {xa.shape} and {xb.shape}")
    n = int(xa.size)
    if n == 0:
        raise ValueError("no paired tasks to compare")
    d = xb - xa
    diff = float(d.mean())
    if n < 2:
        return PairedDifference(
            n=n, mean_a=float(xa.mean()), mean_b=float(xb.mean()), diff=diff, se=None, low=None,
            high=None, confidence=confidence, p_value=None, sd_diff=None, correlation=None,
            se_unpaired=None,
        )  # fmt: skip
    sd = float(d.std(ddof=1))
    se = sd / np.sqrt(n)
    crit = critical_value(confidence, n - 1)
    # a constant nonzero difference is certain given the data (p = 0); none at all, p = 1
    p = float(2 * stats.t.sf(abs(diff) / se, n - 1)) if se > 0 else float(diff == 0)
    corr = None
    if xa.std() > 0 and xb.std() > 0:
        corr = float(np.corrcoef(xa, xb)[0, 1])
    se_unpaired = float(np.sqrt(xa.var(ddof=1) / n + xb.var(ddof=1) / n))
    return PairedDifference(
        n=n,
        mean_a=float(xa.mean()),
        mean_b=float(xb.mean()),
        diff=diff,
        se=float(se),
        low=diff - crit * se,
        high=diff + crit * se,
        confidence=confidence,
        p_value=p,
        sd_diff=sd,
        correlation=corr,
        se_unpaired=se_unpaired,
    )


class McNemar(BaseModel):
    """McNemar's exact test on paired pass/fail outcomes."""

    model_config = ConfigDict(frozen=True)

    a_only: int
    """Tasks A passed and B failed."""
    b_only: int
    """Tasks B passed and A failed."""
    both: int
    neither: int
    p_value: float


def mcnemar_exact(b_only: int, a_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts.

    Under no difference, each of the ``a_only + b_only`` discordant tasks is equally likely to
    favour either run: ``p = min(1, 2 · P[Binomial(a_only + b_only, 1/2) <= min(a_only, b_only)])``.
    """
    from scipy import stats

    if a_only < 0 or b_only < 0:
        raise ValueError(f"counts must be >= 0, got {a_only}, {b_only}")
    m = a_only + b_only
    if m == 0:
        return 1.0
    return float(min(1.0, 2 * stats.binom.cdf(min(a_only, b_only), m, 0.5)))


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> McNemar:
    """McNemar's exact test of paired outcomes ``a[i]``, ``b[i]`` (pass or fail on task i)."""
    if len(a) != len(b):
        raise ValueError(f"need two equally long lists of outcomes, got {len(a)} and {len(b)}")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    both = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    return McNemar(
        a_only=a_only,
        b_only=b_only,
        both=both,
        neither=len(a) - a_only - b_only - both,
        p_value=mcnemar_exact(b_only, a_only),
    )
