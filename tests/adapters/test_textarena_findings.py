"""Flaws of TextArena 0.7.4's own games, reproduced with TextArena alone (no envlab)."""

from __future__ import annotations

import pytest

ta = pytest.importorskip("textarena")


def _bandit_final_reward(pick: str, seed: int = 7) -> tuple[float, dict[str, float]]:
    env = ta.make("Bandit-v0")
    env.reset(num_players=1, seed=seed)
    truth: dict[str, float] = env.state.game_state["ground_truth"]
    done = False
    while not done:  # 20 presses of the chosen button, then the final choice
        done, _ = env.step(action=f"[{pick(truth)}]")
    rewards, _ = env.close()
    return rewards[0], truth


def test_bandit_pays_the_best_button_nothing_and_the_worst_the_most() -> None:
    """Bandit-v0 compares the chosen button with the whole ``ground_truth`` dict (never equal),
    so the right final choice is scored as its regret, 0, and a wrong one as its regret, > 0:
    the reward is inverted (textarena/envs/Bandit/env.py, ``step``)."""
    best, truth = _bandit_final_reward(lambda t: max(t, key=t.get))
    worst, _ = _bandit_final_reward(lambda t: min(t, key=t.get))
    assert best == 0.0  # the correct button, which the prompt says is the goal
    assert worst > best  # the worst button beats it
    assert worst == pytest.approx(max(truth.values()) - min(truth.values()))


def test_guess_the_number_pays_a_constant_guess() -> None:
    """GuessTheNumber-v0 scores a game lost on turns by the closeness of the last guess
    (``_get_percentage_completion``): guessing 1 every turn, never using the hints, earns a
    mean of about 0.37 over seeds (what envlab vet reports as a trivial strategy)."""
    scores = []
    for seed in range(40):
        env = ta.make("GuessTheNumber-v0")
        env.reset(num_players=1, seed=seed)
        done = False
        while not done:
            done, _ = env.step(action="[1]")
        scores.append(env.close()[0][0])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert sum(scores) / len(scores) > 0.3
