"""Means with CIs, against hand-computed values, scipy and statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from envlab.measure import bootstrap_mean_ci, mean_ci, proportion_ci

sm = pytest.importorskip("statsmodels.api")
from statsmodels.stats.proportion import proportion_confint  # noqa: E402
from statsmodels.stats.weightstats import DescrStatsW  # noqa: E402


def test_t_interval_hand_computed() -> None:
    e = mean_ci([1.0, 2.0, 3.0, 4.0])
    # s = sqrt(5/3) = 1.290994, se = s/2 = 0.645497, t(3, 0.975) = 3.182446
    assert e.value == pytest.approx(2.5)
    assert e.se == pytest.approx(0.645497, abs=1e-6)
    assert e.low == pytest.approx(2.5 - 3.182446 * 0.645497, abs=1e-5)
    assert e.high == pytest.approx(2.5 + 3.182446 * 0.645497, abs=1e-5)
    assert (e.n, e.clusters, e.method) == (4, 4, "t")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_t_and_z_intervals_match_scipy_and_statsmodels(seed: int) -> None:
    x = np.random.default_rng(seed).uniform(size=25)
    e = mean_ci(x, confidence=0.9)
    ref = stats.ttest_1samp(x, 0.0).confidence_interval(0.9)
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high))
    assert (e.low, e.high) == pytest.approx(DescrStatsW(x).tconfint_mean(alpha=0.1))
    z = mean_ci(x, dist="z")
    assert (z.low, z.high) == pytest.approx(DescrStatsW(x).zconfint_mean(alpha=0.05))


def test_clustered_se_matches_statsmodels_cluster_robust_ols() -> None:
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 6, size=40)  # unequal samples per task
    task_effect = rng.normal(size=40)
    groups = np.repeat(np.arange(40), sizes)
    y = task_effect[groups] + rng.normal(scale=0.5, size=groups.size)
    e = mean_ci(y, clusters=groups.tolist())
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert e.se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert e.method == "clustered-t" and e.clusters == 40


def test_clustered_equal_sizes_is_the_t_interval_of_task_means() -> None:
    rng = np.random.default_rng(3)
    y = rng.uniform(size=(30, 4))  # 30 tasks, 4 samples each
    e = mean_ci(y.ravel(), clusters=np.repeat(np.arange(30), 4).tolist())
    ref = stats.ttest_1samp(y.mean(axis=1), 0.0).confidence_interval()
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high))


def test_clustering_widens_the_interval_of_correlated_samples() -> None:
    y = np.repeat([0.0, 1.0] * 10, 5)  # each task always gives the same reward
    naive = mean_ci(y)
    clustered = mean_ci(y, clusters=np.repeat(np.arange(20), 5).tolist())
    assert clustered.se is not None and naive.se is not None
    assert clustered.se > 2 * naive.se


def test_singleton_clusters_equal_the_plain_interval() -> None:
    x = [0.2, 0.9, 0.4, 0.7, 0.1]
    assert mean_ci(x, clusters=list("abcde")).se == pytest.approx(mean_ci(x).se)


def test_one_sample_and_one_task_have_no_interval() -> None:
    one = mean_ci([0.7])
    assert one.value == 0.7 and one.se is None and one.low is None and one.half_width is None
    one_task = mean_ci([0.0, 1.0, 1.0], clusters=["t", "t", "t"])
    assert one_task.se is None and one_task.clusters == 1 and one_task.n == 3


def test_bad_input_is_explained() -> None:
    with pytest.raises(ValueError, match="no values"):
        mean_ci([])
    with pytest.raises(ValueError, match="not a zero"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="between 0 and 1"):
        mean_ci([1.0, 2.0], confidence=95)
    with pytest.raises(ValueError, match="one per value"):
        mean_ci([1.0, 2.0], clusters=["a"])


def test_bootstrap_is_deterministic_and_close_to_the_clt() -> None:
    rng = np.random.default_rng(11)
    y = rng.binomial(1, 0.6, size=(200, 3)).astype(float)
    clusters = np.repeat(np.arange(200), 3).tolist()
    b1 = bootstrap_mean_ci(y.ravel(), clusters=clusters, seed=5)
    b2 = bootstrap_mean_ci(y.ravel(), clusters=clusters, seed=5)
    clt = mean_ci(y.ravel(), clusters=clusters)
    assert b1 == b2 and b1.method == "bootstrap"
    assert b1.se == pytest.approx(clt.se, rel=0.15)
    assert b1.low == pytest.approx(clt.low, abs=0.015)
    assert b1.high == pytest.approx(clt.high, abs=0.015)
    assert bootstrap_mean_ci([1.0, 0.0], clusters=["a", "a"]).low is None


def test_bootstrap_agrees_with_scipy_percentile_bootstrap() -> None:
    x = np.random.default_rng(2).exponential(size=300)
    ours = bootstrap_mean_ci(x, n_resamples=4000)
    np.random.seed(1)  # scipy's default generator, whatever its version calls the argument
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile")
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.02)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.02)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (3, 10), (1, 1), (0, 1), (37, 120)])
@pytest.mark.parametrize(
    ("ours", "sm_name", "scipy_name"), [("wilson", "wilson", "wilson"), ("exact", "beta", "exact")]
)
def test_binomial_intervals_match_scipy_and_statsmodels(
    k: int, n: int, ours: str, sm_name: str, scipy_name: str
) -> None:
    e = proportion_ci(k, n, method=ours)  # type: ignore[arg-type]
    assert (e.low, e.high) == pytest.approx(proportion_confint(k, n, method=sm_name), abs=1e-9)
    ref = stats.binomtest(k, n).proportion_ci(method=scipy_name)
    assert (e.low, e.high) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert e.value == pytest.approx(k / n)


def test_wilson_hand_computed_at_zero_successes() -> None:
    # 0 of 10: the upper bound is z² / (n + z²) = 3.841459 / 13.841459
    e = proportion_ci(0, 10)
    assert e.low == 0.0 and e.high == pytest.approx(3.841459 / 13.841459, abs=1e-6)


def test_proportion_bad_input() -> None:
    with pytest.raises(ValueError, match="n >= 1"):
        proportion_ci(0, 0)
    with pytest.raises(ValueError, match="successes <= n"):
        proportion_ci(5, 3)
