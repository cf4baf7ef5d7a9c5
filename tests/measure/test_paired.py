"""Paired differences and McNemar's test, against hand-computed values, scipy and statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from envlab.measure import mcnemar, mcnemar_exact, paired_difference

contingency = pytest.importorskip("statsmodels.stats.contingency_tables")


def test_paired_difference_hand_computed() -> None:
    a, b = [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]
    p = paired_difference(a, b)
    # d = [1, 1, 0, -1]: mean 0.25, sd = sqrt(2.75 / 3) = 0.957427, se = 0.478714
    assert p.diff == pytest.approx(0.25)
    assert p.sd_diff == pytest.approx(0.957427, abs=1e-6)
    assert p.se == pytest.approx(0.478714, abs=1e-6)
    assert p.low == pytest.approx(0.25 - 3.182446 * 0.478714, abs=1e-5)
    assert (p.mean_a, p.mean_b, p.n) == (0.5, 0.75, 4)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_paired_difference_matches_scipy_ttest_rel(seed: int) -> None:
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(size=50)
    a = np.clip(difficulty + rng.normal(scale=0.2, size=50), 0, 1)
    b = np.clip(difficulty + 0.05 + rng.normal(scale=0.2, size=50), 0, 1)
    p = paired_difference(a, b, confidence=0.9)
    ref = stats.ttest_rel(b, a)
    ci = ref.confidence_interval(0.9)
    assert p.p_value == pytest.approx(ref.pvalue)
    assert (p.low, p.high) == pytest.approx((ci.low, ci.high))
    assert p.correlation == pytest.approx(np.corrcoef(a, b)[0, 1])
    # pairing removes the shared task difficulty: the paired SE is smaller
    assert p.se is not None and p.se_unpaired is not None and p.se < 0.8 * p.se_unpaired


def test_constant_and_zero_differences() -> None:
    sure = paired_difference([0.0] * 5, [1.0] * 5)
    assert sure.diff == 1.0 and sure.se == 0.0 and sure.p_value == 0.0
    assert sure.low == sure.high == 1.0 and sure.correlation is None
    same = paired_difference([0.3, 0.5], [0.3, 0.5])
    assert same.diff == 0.0 and same.p_value == 1.0


def test_one_task_has_no_interval() -> None:
    p = paired_difference([0.0], [1.0])
    assert p.diff == 1.0 and p.se is None and p.p_value is None and p.low is None


def test_paired_bad_input() -> None:
    with pytest.raises(ValueError, match="equally long"):
        paired_difference([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="no paired tasks"):
        paired_difference([], [])


@pytest.mark.parametrize(
    ("b_only", "a_only", "want"),
    [
        (5, 0, 2 / 32),  # 2 * P[Bin(5, 1/2) <= 0]
        (0, 0, 1.0),  # no discordant task
        (3, 3, 1.0),
        (1, 6, 2 * 8 / 128),  # 2 * P[Bin(7, 1/2) <= 1] = 2 * (1 + 7) / 128
    ],
)
def test_mcnemar_hand_computed(b_only: int, a_only: int, want: float) -> None:
    assert mcnemar_exact(b_only, a_only) == pytest.approx(want)


@pytest.mark.parametrize(("b_only", "a_only"), [(5, 0), (12, 4), (30, 18), (1, 1), (0, 9)])
def test_mcnemar_matches_statsmodels_and_scipy(b_only: int, a_only: int) -> None:
    table = [[20, a_only], [b_only, 7]]  # rows: A pass/fail; columns: B pass/fail
    ref = contingency.mcnemar(np.array(table), exact=True)
    assert mcnemar_exact(b_only, a_only) == pytest.approx(ref.pvalue)
    if a_only + b_only:
        assert mcnemar_exact(b_only, a_only) == pytest.approx(
            stats.binomtest(b_only, a_only + b_only, 0.5).pvalue
        )


def test_mcnemar_counts_outcomes() -> None:
    a = [True, True, False, False, True]
    b = [True, False, True, True, True]
    m = mcnemar(a, b)
    assert (m.both, m.a_only, m.b_only, m.neither) == (2, 1, 2, 0)
    assert m.p_value == pytest.approx(1.0)
