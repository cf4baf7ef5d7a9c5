"""Flaws of TextArena 0.7.4's own games, reproduced with TextArena alone (no envlab)."""

from __future__ import annotations

import copy
import random
import re

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


@pytest.mark.parametrize("game", ["GuessTheNumber-v0", "GuessTheNumber-v0-hardcore"])
def test_guess_the_number_pays_a_constant_guess(game: str) -> None:
    """GuessTheNumber-v0 scores a game lost on turns by the closeness of the last guess
    (``_get_percentage_completion``): guessing 1 every turn, never using the hints, earns a
    mean of about 0.37 over seeds (what envlab vet reports as a trivial strategy)."""
    scores = []
    for seed in range(40):
        env = ta.make(game)
        env.reset(num_players=1, seed=seed)
        done = False
        while not done:
            done, _ = env.step(action="[1]")
        scores.append(env.close()[0][0])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert sum(scores) / len(scores) > 0.3


def _play_single(game: str, seed: int, move: object) -> tuple[object, dict]:
    """One game, the same ``move`` (text, or a function of the first observation) every turn."""
    env = ta.make(game)
    env.reset(num_players=1, seed=seed)
    first = env.get_observation()[1]
    text = move(first) if callable(move) else move
    done = False
    while not done:
        done, _ = env.step(action=text)
    rewards, info = env.close()
    return rewards[0], info[0]


@pytest.mark.parametrize("game", ["Countdown-v0", "Cryptarithm-v0", "Slitherlink-v0",
                                  "ThreeCardMonte-v0"])  # fmt: skip
def test_an_invalid_move_gets_a_string_for_its_reward(game: str) -> None:
    """These games call ``set_invalid_move(progress, reason)`` while TextArena's signature is
    ``set_invalid_move(reason, reward)``: the reward of an invalid move is the message text.
    (envlab scores it as the invalid move's forfeit, 0, and vet reports the defect.)"""
    reward, info = _play_single(game, 0, "junk")
    assert isinstance(reward, str) and info["invalid_move"]


V2048 = ["ultra-easy", "mega-easy", "super-easy", "very-easy", "easy", "hard", "very-hard",
         "extreme", "3x3", "5x5", "6x6", "8x8", "10x10"]  # fmt: skip


@pytest.mark.parametrize(
    "game", ["2048-v0", *(f"2048-v0-{v}" for v in V2048), "PegJump-v0", "RushHour-v0"]
)
def test_an_invalid_first_move_still_earns_progress_credit(game: str) -> None:
    """Doing nothing (an empty move, the game's invalid move) ends the game as a forfeit yet
    pays the progress of the untouched start position (what vet reports as the no-op scoring
    above 0): 2048 about 0.001, PegJump 0.071, RushHour 0.25 on most seeds."""
    played = [_play_single(game, seed, "") for seed in range(6)]
    assert all(info["invalid_move"] for _, info in played)
    assert sum(isinstance(r, float) and r > 0 for r, _ in played) >= 4


def test_mastermind_pays_partial_credit_for_repeating_its_example_guess() -> None:
    """Echoing the first observation every turn submits the example guess the instructions
    show, again and again; the game ends on turns and pays the pegs it happened to match."""
    for game in ("Mastermind-v0", "Mastermind-v0-hard"):
        rewards = [_play_single(game, seed, lambda first: first)[0] for seed in range(8)]
        assert all(isinstance(r, float) for r in rewards)
        assert sum(rewards) / len(rewards) > 0.2


def _random_legal(env: object, rng: random.Random, text: str) -> str:
    """A uniformly random move among the bracketed ones the text shows (each number in them
    also tried as 0..9) that the game accepts, tried on a copy: a random legal player."""
    shown = list(dict.fromkeys(re.findall(r"\[[^\[\]\n]{1,40}\]", text)))
    varied = [m[: d.start()] + str(k) + m[d.end() :] for m in shown
              for d in re.finditer(r"\d+", m) for k in range(10)]  # fmt: skip
    moves = list(dict.fromkeys(shown + varied))
    rng.shuffle(moves)
    for move in moves:
        trial = copy.deepcopy(env)
        before = trial.state.error_count
        trial.step(action=move)
        st = trial.state
        if not (st.done and st.game_info[1].get("invalid_move")) and st.error_count <= before:
            return move
    raise AssertionError("no legal move shown")


def _vs_random(game: str, seed: int, strategy: str) -> float:
    """Player 0 sends its first observation as every move (``echo``) or nothing (``noop``);
    player 1 plays random legal moves. Player 0's reward, scaled from [-1, 1] to [0, 1]."""
    env = ta.make(game)
    env.reset(num_players=2, seed=seed)
    rng, first, done, turns = random.Random(seed), env.get_observation()[1], False, 0
    while not done and turns < 500:
        pid, obs = env.get_observation()
        state = random.getstate()
        mine = first if strategy == "echo" else ""
        move = mine if pid == 0 else _random_legal(env, rng, obs)
        random.setstate(state)
        done, _ = env.step(action=move)
        turns += 1
    assert done
    return (env.close()[0][0] + 1) / 2


def test_a_reply_with_every_option_wins_against_a_random_player() -> None:
    """IteratedPrisonersDilemma matches the decision token anywhere in the reply and
    ``[Defect]`` wins a reply that holds both: echoing the instructions (which list both)
    defects every round and beats a random player on every seed (vet: echo_prompt scores 1)."""
    assert [_vs_random("IteratedPrisonersDilemma-v0", s, "echo") for s in range(8)] == [1.0] * 8


ECHO_BEATS_NOOP = [
    "ConnectFour-v0-large",
    *(f"MemoryGame-v0{v}" for v in ("", "-medium", "-hard")),
    "IteratedUltimatumGame-v0",
    *(f"Snake-v0{v}" for v in ("", "-standard", "-large")),
    *(f"Surround-v0{v}" for v in ("", "-standard", "-large")),
    "SimpleNegotiation-v0",
    "SimpleBlindAuction-v0",
]
NOOP_SCORES = ["SimpleBlindAuction-v0", "SimpleNegotiation-v0", "TruthAndDeception-v0"]


@pytest.mark.parametrize("game", ECHO_BEATS_NOOP)
def test_repeating_the_instructions_beats_doing_nothing_against_a_random_player(game: str) -> None:
    """What vet reports as ``trivial`` (echo_prompt) on these two-player games, against a
    random legal opponent: sending the first observation back as every move (its first
    bracketed move, again and again) earns at least 1 point more over 8 seeds than doing
    nothing. True of the game as offered with a random opponent; a stronger one would not
    lose to it."""
    echo = sum(_vs_random(game, s, "echo") for s in range(8))
    noop = sum(_vs_random(game, s, "noop") for s in range(8))
    assert echo >= noop + 1, (echo, noop)


@pytest.mark.parametrize("game", NOOP_SCORES)
def test_doing_nothing_scores_against_a_random_player(game: str) -> None:
    """Saying nothing is a legal move in these games (a message, a silent deceiver, no bid):
    against a random opponent it draws or wins on some seeds (vet: noop scores above 0)."""
    assert sum(_vs_random(game, s, "noop") for s in range(8)) > 0
