"""The TextArena adapter against TextArena itself: same moves, same observations, same rewards."""

from __future__ import annotations

import asyncio
import random

import pytest

ta = pytest.importorskip("textarena")

from envlab.adapters.textarena import TextArenaEnv, catalog  # noqa: E402
from envlab.core import Action, validate_reward  # noqa: E402
from envlab.core.rubric import reward_range_of  # noqa: E402
from envlab.envs import load_env  # noqa: E402


def _direct(game: str, seed: int, players: int, moves: list[str]) -> tuple[list, bool, tuple]:
    """TextArena's own loop, no envlab: the agent's observations, the end, ``close()``."""
    env = ta.make(game)
    env.reset(num_players=players, seed=seed)
    seen, done = [], False
    for move in moves:
        seen.append(env.get_observation())
        done, _ = env.step(action=move)
        if done:
            break
    seen.append(env.get_observation())
    return seen, done, env.close() if done else ({}, {})


async def _through_envlab(spec: TextArenaEnv, seed_index: int, moves: list[str]):
    task = spec.tasks(n=seed_index + 1)[seed_index]
    env = spec.new_episode()
    shown = [(await env.reset(task)).text]
    result = None
    for m in moves:
        result = await env.step(Action(text=m))
        shown.append(result.observation.text)
        if result.done:
            break
    return task, env, shown, result, await env.grade()


@pytest.mark.parametrize(
    ("game", "moves"),
    [
        (
            "GuessTheNumber-v0",
            ["[10]", "[5]", "[15]", "[3]", "[18]", "[7]", "[12]", "[1]", "[20]", "[8]"],
        ),
        ("TowerOfHanoi-v0", ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]),
        ("GuessTheNumber-v0", ["no move"] * 3),
        ("GuessTheNumber-v0", ["[10]", "[5]"]),
    ],
)
def test_single_player_same_as_textarena(game: str, moves: list[str]) -> None:
    spec = TextArenaEnv(game=game, observation="full")
    task, _env, shown, result, reward = asyncio.run(_through_envlab(spec, 2, moves))
    seen, done, (rewards, info) = _direct(game, task.metadata["seed"], 1, moves)
    assert [obs for _, obs in seen] == shown
    assert result is not None and result.done == done
    if not done:  # stopped before the game's end: scored as TextArena's loss
        assert reward.total == 0.0 and reward.details["finished"] is False
        return
    assert reward.details["raw_reward"] == rewards[0]
    assert reward.total == (0.0 if rewards[0] == -1 else rewards[0])
    assert reward.details["reason"] == info[0]["reason"]
    assert validate_reward(reward, reward_range_of(task.metadata)).total == reward.total


def test_two_player_opponent_is_scripted_and_same_as_textarena() -> None:
    spec = TextArenaEnv(game="TicTacToe-v0")
    moves = ["[4]", "[0]", "[8]", "[2]", "[6]", "[1]", "[3]", "[5]", "[7]"]
    task, env, _shown, _result, reward = asyncio.run(_through_envlab(spec, 1, moves))
    game = env.game
    assert game is not None and game.done
    # replay both seats' moves, as envlab's game recorded them, through TextArena alone
    direct = ta.make("TicTacToe-v0")
    direct.reset(num_players=2, seed=task.metadata["seed"])
    for player, move in game.moves:
        assert direct.get_observation()[0] == player
        direct.step(action=move)
    rewards, _ = direct.close()
    assert reward.total == rewards[0]
    normalised = validate_reward(reward, reward_range_of(task.metadata)).total
    assert normalised == pytest.approx((rewards[0] + 1) / 2)
    again = asyncio.run(_through_envlab(spec, 1, moves))[1].game
    assert again is not None and again.moves == game.moves  # the opponent is deterministic


def test_new_observations_add_up_to_textarenas_full_ones() -> None:
    full = TextArenaEnv(game="GuessTheNumber-v0", observation="full")
    new = TextArenaEnv(game="GuessTheNumber-v0")
    moves = ["[10]", "[5]", "[15]"]
    *_, shown_full = asyncio.run(_through_envlab(full, 0, moves))[2:3]
    shown_new = asyncio.run(_through_envlab(new, 0, moves))[2]
    for i in range(len(shown_new)):
        assert shown_full[i].strip().endswith(shown_new[i].strip())


def test_episodes_interleaved_stay_deterministic_and_leave_global_random_alone() -> None:
    spec = TextArenaEnv(game="2048-v0-3x3")
    moves = ["[up]", "[left]", "[down]", "[right]"] * 3

    async def both():
        random.seed(123)
        before = random.random()
        random.seed(123)
        a = asyncio.create_task(_through_envlab(spec, 0, moves))
        b = asyncio.create_task(_through_envlab(spec, 0, moves))
        out = await asyncio.gather(a, b)
        return out, before, random.random()

    (a, b), before, after = asyncio.run(both())
    assert a[2] == b[2]
    alone = asyncio.run(_through_envlab(spec, 0, moves))
    assert alone[2] == a[2]
    assert before == after


def test_loads_by_name_with_declared_range() -> None:
    spec = load_env("ta:GuessTheNumber-v0", size=3)
    assert spec.name == "ta:GuessTheNumber-v0"
    tasks = spec.tasks()
    assert len(tasks) == 3 and len({t.prompt for t in tasks}) >= 1
    assert "reward_range" not in tasks[0].metadata  # single-player: [0, 1] as it is
    assert load_env("ta:TicTacToe-v0", size=1).tasks()[0].metadata["reward_range"] == [-1, 1]
    assert spec.tasks().content_hash() == tasks.content_hash()


def test_unknown_game_says_how_to_list_them() -> None:
    from envlab.core import ConfigError

    with pytest.raises(ConfigError, match="no game 'NoSuchGame-v0'"):
        load_env("ta:NoSuchGame-v0")


def test_catalog_reports_every_game_loaded_or_with_its_reason() -> None:
    rows = {r.name: r for r in catalog()}
    assert rows["ta:Sudoku-v0-very-easy"].loaded or True  # slow generators are still listed
    assert rows["ta:TicTacToe-v0"].loaded and rows["ta:TicTacToe-v0"].players == 2
    assert rows["ta:GuessTheNumber-v0"].loaded and rows["ta:GuessTheNumber-v0"].players == 1
    for r in rows.values():
        assert r.loaded or r.reason, r


@pytest.mark.parametrize("game", ["KuhnPoker-v0", "ConnectFour-v0", "IteratedPrisonersDilemma-v0"])
def test_the_opponent_plays_only_moves_the_game_accepts(game: str) -> None:
    """The opponent tries each move on a copy of the game first: replayed through TextArena
    alone, no opponent move is refused, and no game ends on the opponent's invalid move (a
    forfeit that would be scored as the agent's win)."""
    from envlab.adapters.textarena_game import GameRun, ScriptedOpponent, is_legal

    for seed in range(3):
        run, me = GameRun(game, seed, 2, 0), ScriptedOpponent(seed + 7)
        new, full = run.start()
        while not run.done and len(run.moves) < 40:  # the agent's seat plays legal moves too
            new, full = run.move(next(m for m in me.candidates(new, full)
                                      if is_legal(run.env, 0, m)))  # fmt: skip
        direct = ta.make(game)
        direct.reset(num_players=2, seed=seed)
        for player, move in run.moves:
            errors = direct.state.error_count
            direct.step(action=move)
            assert direct.state.error_count <= errors, (seed, player, move)
        if run.done:
            assert not direct.close()[1][1].get("invalid_move")


async def test_an_opponent_with_no_legal_move_is_the_machinerys_failure() -> None:
    """Breakthrough writes one example move ([a2a3], White's) and no list: the opponent finds
    no legal move. The episode is ``env_error`` (excluded, counted), never the agent's win,
    and the catalogue does not offer the game."""
    from envlab.adapters.textarena import _try_game
    from envlab.adapters.textarena_game import scripted_trial
    from envlab.core import Status
    from tests.support.envs import ScriptAgent
    from tests.support.play import play

    spec = TextArenaEnv(game="Breakthrough-v0-tiny")
    t = await play(spec, ScriptAgent([Action(text="[a2a3]")] * 5))
    assert t.status is Status.ENV_ERROR and t.reward is None, (t.status, t.reward)
    assert t.error is not None and "envlab's scripted opponent" in t.error.message
    why = scripted_trial("Breakthrough-v0-tiny")
    assert why is not None and "cannot be played against envlab's scripted opponent" in why
    entry = _try_game("Breakthrough-v0-tiny")
    assert not entry.loaded and entry.reason == why
    assert _try_game("KuhnPoker-v0").loaded
