import itertools
import random

import pytest

CASES = [
    ([], []),
    ([(1, 2)], [(1, 2)]),
    ([(5, 7), (1, 3), (2, 4)], [(1, 4), (5, 7)]),
    ([(1, 2), (2, 3)], [(1, 3)]),
    ([(1, 10), (2, 3), (4, 5)], [(1, 10)]),
    ([(3, 4), (1, 2)], [(1, 2), (3, 4)]),
]


@pytest.mark.parametrize(("given", "expected"), CASES)
def test_cases(merge_all, given, expected):
    assert merge_all([given]) == [expected]


def test_random_against_reference(merge_all):
    rng = random.Random(0)
    inputs = [
        [tuple(sorted((rng.randint(0, 50), rng.randint(0, 50)))) for _ in range(8)]
        for _ in range(200)
    ]
    for ivs, got in zip(inputs, merge_all(inputs), strict=True):
        covered = {x for a, b in ivs for x in range(2 * a, 2 * b + 1)}
        assert {x for a, b in got for x in range(2 * a, 2 * b + 1)} == covered
        assert got == sorted(got)
        assert all(b[0] > a[1] for a, b in itertools.pairwise(got))
