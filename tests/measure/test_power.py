"""Power analysis (Miller 2024), against hand-computed values, statsmodels and a simulation."""

from __future__ import annotations

import numpy as np
import pytest

from envlab.measure import (
    VarianceComponents,
    minimum_detectable_difference,
    paired_difference,
    paired_variance_components,
    samples_needed,
    tasks_needed,
    variance_components,
)

Z = 1.959964 + 0.841621  # z_{0.975} + z_{0.8}


def test_minimum_detectable_difference_hand_computed() -> None:
    var = VarianceComponents(between=0.25, within=0.0)
    assert minimum_detectable_difference(100, var) == pytest.approx(Z * 0.05, abs=1e-5)
    # K samples shrink only the within-task part: (0.04 + 0.2 / 4) / 100
    var = VarianceComponents(between=0.04, within=0.2)
    mdd = minimum_detectable_difference(100, var, k=4)
    assert mdd == pytest.approx(Z * np.sqrt(0.09 / 100), abs=1e-5)


def test_tasks_needed_hand_computed_and_inverse_of_mdd() -> None:
    var = VarianceComponents(between=0.25, within=0.0)
    n = tasks_needed(0.05, var)
    assert n == 785  # 7.848879 * 0.25 / 0.0025 = 784.89
    assert minimum_detectable_difference(n, var) <= 0.05 < minimum_detectable_difference(n - 1, var)


def test_tasks_needed_matches_statsmodels_normal_power() -> None:
    power = pytest.importorskip("statsmodels.stats.power")
    for sd, delta in [(0.5, 0.05), (0.3, 0.02), (1.0, 0.2)]:
        ref = power.NormalIndPower().solve_power(
            effect_size=delta / sd, alpha=0.05, power=0.8, ratio=0
        )
        ours = tasks_needed(delta, VarianceComponents(between=sd**2, within=0.0))
        assert ours == pytest.approx(ref, abs=1.0)  # statsmodels counts the far tail too


def test_samples_needed() -> None:
    var = VarianceComponents(between=0.01, within=0.2)
    k = samples_needed(0.05, 300, var)
    assert k is not None
    assert minimum_detectable_difference(300, var, k=k) <= 0.05
    assert minimum_detectable_difference(300, var, k=k - 1) > 0.05
    # the spread between tasks alone exceeds what 300 tasks can resolve: only more tasks help
    assert samples_needed(0.05, 300, VarianceComponents(between=0.5, within=0.2)) is None
    assert samples_needed(0.05, 300, VarianceComponents(between=0.0, within=0.0)) == 1


def test_power_bad_input() -> None:
    var = VarianceComponents(between=0.1, within=0.1)
    with pytest.raises(ValueError, match="> 0"):
        tasks_needed(0.0, var)
    with pytest.raises(ValueError, match="alpha"):
        minimum_detectable_difference(10, var, alpha=5)
    with pytest.raises(ValueError, match="power"):
        minimum_detectable_difference(10, var, power=80)
    with pytest.raises(ValueError, match=">= 0"):
        tasks_needed(0.1, VarianceComponents(between=-1.0, within=0.0))


def test_variance_components_hand_computed() -> None:
    var = variance_components({"a": [0.0, 1.0], "b": [1.0, 1.0], "c": [0.0, 0.0]})
    # within = mean(0.5, 0, 0) = 1/6; task means (0.5, 1, 0) have variance 1/4; K = 2
    assert var.within == pytest.approx(1 / 6)
    assert var.between == pytest.approx(1 / 4 - 1 / 12)
    one = variance_components({"a": [1.0], "b": [0.0]})  # one sample per task: no within
    assert one.within == 0.0 and one.between == pytest.approx(0.5)
    with pytest.raises(ValueError, match="2 tasks"):
        variance_components({"a": [1.0]})


def test_paired_variance_components_recover_a_simulated_design() -> None:
    rng = np.random.default_rng(0)
    n, k = 400, 8
    p_a = rng.uniform(0.2, 0.8, size=n)
    p_b = np.clip(p_a + rng.normal(0.05, 0.1, size=n), 0, 1)
    a = {str(i): rng.binomial(1, p_a[i], size=k).astype(float).tolist() for i in range(n)}
    b = {str(i): rng.binomial(1, p_b[i], size=k).astype(float).tolist() for i in range(n)}
    var = paired_variance_components(a, b)
    true_between = float(np.var(p_b - p_a, ddof=1))
    true_within = float(np.mean(p_a * (1 - p_a) + p_b * (1 - p_b)))
    assert var.between == pytest.approx(true_between, rel=0.3)
    assert var.within == pytest.approx(true_within, rel=0.1)


def test_the_minimum_detectable_difference_is_detected_80_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    n, sd, sims = 200, 0.3, 1000
    mdd = minimum_detectable_difference(n, VarianceComponents(between=sd**2, within=0.0))
    d = rng.normal(mdd, sd, size=(sims, n))
    detected = 0
    for row in d:
        p = paired_difference(np.zeros(n), row)
        detected += p.p_value is not None and p.p_value < 0.05
    assert 0.75 <= detected / sims <= 0.85
