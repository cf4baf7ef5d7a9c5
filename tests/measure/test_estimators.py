from __future__ import annotations

import pytest

from envlab.measure import pass_at_k, pass_hat_k


@pytest.mark.parametrize(
    ("n", "c", "k", "want"),
    [
        (10, 3, 1, 0.3),  # pass@1 is the success rate
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (4, 0, 3, 0.0),  # c = 0
        (4, 4, 3, 1.0),  # c = n
        (4, 2, 3, 1.0),  # n - c < k: every draw of 3 contains a pass
        (1, 1, 1, 1.0),  # one sample
        (1, 0, 1, 0.0),
        (20, 5, 4, 1 - 1365 / 4845),  # C(15,4)=1365, C(20,4)=4845
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, want: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(want)


@pytest.mark.parametrize(
    ("n", "c", "k", "want"),
    [
        (10, 3, 1, 0.3),
        (5, 2, 2, 1 / 10),  # C(2,2)/C(5,2)
        (4, 3, 2, 3 / 6),  # C(3,2)/C(4,2)
        (4, 0, 1, 0.0),
        (4, 4, 4, 1.0),
        (4, 2, 3, 0.0),  # fewer passes than k
        (20, 15, 4, 1365 / 4845),
    ],
)
def test_pass_hat_k_hand_computed(n: int, c: int, k: int, want: float) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(want)


def test_pass_hat_never_exceeds_pass_at() -> None:
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_hat_k(n, c, k) <= pass_at_k(n, c, k) + 1e-12


@pytest.mark.parametrize("fn", [pass_at_k, pass_hat_k])
def test_bad_arguments_are_explained(fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="larger than the n=3"):
        fn(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        fn(3, 4, 1)
    with pytest.raises(ValueError, match="k >= 1"):
        fn(3, 1, 0)
