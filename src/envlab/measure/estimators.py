"""Unbiased pass@k and τ-bench's pass^k from n samples with c successes."""

from __future__ import annotations

from math import comb


def _check(n: int, c: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"need n >= 1 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if k < 1:
        raise ValueError(f"need k >= 1, got k={k}")
    if k > n:
        raise ValueError(
            f"k={k} is larger than the n={n} samples per task; the unbiased estimator needs "
            f"k <= n. Run with --samples {k} or more, or ask for a smaller k."
        )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement passes.

    The unbiased estimator of Chen et al. (2021): ``1 - C(n-c, k) / C(n, k)``.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """τ-bench's pass^k: probability that all k samples drawn without replacement pass.

    ``C(c, k) / C(n, k)``; a measure of reliability rather than of capability.
    """
    _check(n, c, k)
    return comb(c, k) / comb(n, k)
