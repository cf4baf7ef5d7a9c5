from __future__ import annotations

import pytest

from envlab.envs.answers import extract_number, format_number, numbers_equal


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("42", 42),
        ("The answer is 42.", 42),
        ("3 + 4 = 7, then 7 * 2 = 14. The answer is 14", 14),
        ("Answer: $1,234.50", 1234.5),
        ("#### -17", -17),
        ("so we get \\boxed{3/4} overall", 0.75),
        ("It costs 12 dollars; final answer: 36 apples", 36),
        ("I think 5 or maybe 6", 6),
        ("−8 is the result", -8),
        ("result = .5", 0.5),
    ],
)
def test_extract_number(text: str, want: float) -> None:
    assert extract_number(text) == pytest.approx(want)


@pytest.mark.parametrize("text", ["", None, "no number here", "\\boxed{}"])
def test_no_number(text: str | None) -> None:
    assert extract_number(text) is None


def test_equality_and_format() -> None:
    assert numbers_equal(0.1 + 0.2, 0.3)
    assert not numbers_equal(None, 1.0)
    assert not numbers_equal(2.0, 3.0)
    assert format_number(19.0) == "19"
    assert format_number(2.5) == "2.5"
