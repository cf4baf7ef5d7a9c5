"""Flaws of reasoning-gym itself, reproduced with reasoning-gym alone (no envlab in the loop)."""

from __future__ import annotations

import random

import pytest

rg = pytest.importorskip("reasoning_gym")


def test_list_functions_is_not_deterministic_in_its_seed() -> None:
    """Its generators draw from the global ``random`` module, not the entry's seeded ``rng``
    (reasoning_gym/induction/list_functions/generators.py): the same seed and index give
    different questions, so its tasks cannot be replayed or compared across runs."""
    questions = set()
    for state in range(20):
        random.seed(state)
        questions.add(rg.create_dataset("list_functions", seed=0, size=20)[0]["question"])
    assert len(questions) > 1


def test_boxnet_and_rush_hour_entries_carry_no_answer() -> None:
    """Their entries' ``answer`` is ``None`` and the metadata shows no solution: a reference
    answer to check the grader with does not exist (envlab's oracle cannot pass)."""
    for name in ("boxnet", "rush_hour"):
        entry = rg.create_dataset(name, seed=0, size=2)[0]
        assert entry["answer"] is None


def test_prime_factorization_scorer_crashes_on_a_non_numeric_answer() -> None:
    """``score_answer`` raises ``ValueError`` (``int('...')``) instead of scoring a wrong answer
    0: a grader that crashes on the agent's answer (envlab records ``grader_failed``, 0)."""
    ds = rg.create_dataset("prime_factorization", seed=0, size=2)
    with pytest.raises(ValueError):
        ds.score_answer("certainly not this 123", ds[0])


@pytest.mark.parametrize("dataset", ["countdown", "fraction_simplification", "puzzle24"])
def test_an_empty_answer_earns_credit(dataset: str) -> None:
    """What the arena reports as ``noop`` on these datasets (doing nothing scores above 0),
    reproduced with reasoning-gym alone: its scorer pays a small credit for no answer at all,
    so an agent that says nothing is paid, and a group that fails together is not flat at 0."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset(dataset, seed=0, size=5)
    paid = [ds.score_answer(None, entry) for entry in ds]
    assert all(p > 0 for p in paid), paid
