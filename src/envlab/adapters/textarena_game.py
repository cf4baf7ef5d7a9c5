"""One TextArena game played to its end: the agent's player, a scripted opponent, isolated RNG.

No envlab contract here: ``GameRun`` drives ``textarena.make(...)`` exactly as TextArena's own
loop does (``reset`` / ``get_observation`` / ``step`` / ``close``), so the differential tests can
replay the same moves through it and through TextArena directly.
"""

from __future__ import annotations

import contextlib
import copy
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from envlab.core import ConfigError, GraderFailed

BRACKETED = re.compile(r"\[[^\[\]\n]{1,40}\]")
"""A move written TextArena's way (``[4]``, ``[e2e4]``, ``[up]``), as games list them."""


def import_textarena() -> Any:
    """The ``textarena`` module, or a ``ConfigError`` that says how to install it."""
    try:
        import textarena
    except ImportError as e:
        raise ConfigError(
            f"TextArena is not installed ({e}); install the extra: pip install 'envlab[textarena]'"
        ) from None
    return textarena


NUMBER = re.compile(r"\d+")
MAX_TRIED = 60
"""Moves the opponent tries on a copy of the game before it gives up."""


class OpponentStuck(RuntimeError):
    """envlab's scripted opponent found no legal move: the machinery's failure, never the
    agent's win (a forfeit by the opponent would otherwise be scored as one)."""


class ScriptedOpponent:
    """The fixed opponent of two-player games: a seeded random choice among the *legal* moves
    written in brackets in what it was shown (the ``Available Moves: '[0]', '[4]'`` lists many
    TextArena games print, the moves in its instructions). Each candidate is tried on a copy of
    the game first; one the game refuses as invalid is never played, so the opponent never
    forfeits. Deterministic in ``seed``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"envlab-textarena-opponent:{seed}")

    def candidates(self, new_text: str, full_text: str) -> list[str]:
        """The bracketed moves it was shown, newest text first, then the same moves with each
        number changed (``[col 4]`` shown, ``[col 0]``..``[col 9]`` tried): each once, in a
        seeded order within each group."""
        new = list(dict.fromkeys(BRACKETED.findall(new_text)))
        rest = [m for m in dict.fromkeys(BRACKETED.findall(full_text)) if m not in new]
        varied = [v for m in new + rest for v in _numbers_varied(m)]
        varied = [v for v in dict.fromkeys(varied) if v not in new and v not in rest]
        for group in (new, rest, varied):
            self.rng.shuffle(group)
        return (new + rest + varied)[:MAX_TRIED]


def _numbers_varied(move: str) -> list[str]:
    """``move`` with one of its numbers replaced by each of 0..9."""
    out = []
    for m in NUMBER.finditer(move):
        out += [f"{move[: m.start()]}{k}{move[m.end() :]}" for k in range(10)]
    return out


def is_legal(env: Any, player: int, action: str) -> bool:
    """Whether ``player`` may play ``action`` now: played on a deep copy of the game (the real
    one and Python's global ``random`` are left as they were), it is legal unless the game
    counted an error against the player or ended the game on its invalid move."""
    state = random.getstate()
    before = getattr(env.state, "error_count", 0)
    try:
        trial = copy.deepcopy(env)
        trial.step(action=action)
    except Exception:  # the game's code failed on this move: not one to play
        return False
    finally:
        random.setstate(state)
    st = trial.state
    if st.done:
        return not st.game_info.get(player, {}).get("invalid_move")
    return getattr(st, "error_count", 0) <= before


@dataclass
class Outcome:
    """How the game ended, as TextArena reported it (``env.close()``)."""

    reward: float
    """The agent's player's reward, as the game set it (TextArena's range: [-1, 1])."""
    rewards: dict[int, float]
    game_info: dict[str, Any] = field(default_factory=dict)
    finished: bool = True
    defect: str = ""
    """What was wrong with the game's own result, when it gave one envlab had to mend."""


def _as_text(observation: Any) -> str:
    """An observation as text: wrapped games give a string; ``-raw`` ones a list of
    ``(sender, message, type)``, joined one message a line."""
    if isinstance(observation, str):
        return observation
    if isinstance(observation, list):
        return "\n".join(str(m[1]) if isinstance(m, tuple) else str(m) for m in observation)
    return str(observation)


class GameRun:
    """One game of ``game_id`` with ``num_players`` seated, the agent as ``agent_player``.

    TextArena seeds Python's global ``random`` in ``reset`` and draws from it during play;
    every call into the game runs with this game's own copy of that state (saved and put back
    around the call), so that games played side by side in one process stay deterministic.
    """

    def __init__(self, game_id: str, seed: int, num_players: int, agent_player: int = 0) -> None:
        ta = import_textarena()
        if not 0 <= agent_player < num_players:
            raise ConfigError(
                f"agent_player {agent_player} is not a seat of a {num_players}-seat game"
            )
        self.game_id, self.seed = game_id, seed
        self.num_players, self.agent_player = num_players, agent_player
        self.opponent = ScriptedOpponent(seed)
        self._rng: Any = random.Random(seed).getstate()
        self._seen: dict[int, int] = {}  # per player: how much of its full text it has seen
        self.done = False
        self.moves: list[tuple[int, str]] = []
        with self._own_random():
            self.env = ta.make(game_id)

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        outer = random.getstate()
        random.setstate(self._rng)
        try:
            yield
        finally:
            self._rng = random.getstate()
            random.setstate(outer)

    def start(self) -> tuple[str, str]:
        """Reset and play the opponents up to the agent's first turn: ``(new, full)`` text."""
        with self._own_random():
            self.env.reset(num_players=self.num_players, seed=self.seed)
            shown = self._to_agent_turn()
        if self.done:
            raise OpponentStuck(
                f"{self.game_id} (seed {self.seed}) ended before the agent's first turn "
                f"({self.moves}): there is no game to play"
            )
        return shown

    def move(self, text: str) -> tuple[str, str]:
        """The agent's move, then the opponents' up to its next turn (or the end)."""
        with self._own_random():
            self.moves.append((self.agent_player, text))
            self.done, _ = self.env.step(action=text)
            return self._to_agent_turn()

    def _observe(self) -> tuple[int, str, str]:
        player, observation = self.env.get_observation()
        full = _as_text(observation)
        seen = self._seen.get(player, 0)
        new = full[seen:] if len(full) >= seen else full
        self._seen[player] = len(full)
        return player, new, full

    def _to_agent_turn(self) -> tuple[str, str]:
        while not self.done:
            player, new, full = self._observe()
            if player == self.agent_player:
                return new, full
            action = self._opponent_move(player, new, full)
            self.moves.append((player, action))
            self.done, _ = self.env.step(action=action)
        player, new, full = self._observe()  # what the game said last (the outcome)
        return (new, full) if player == self.agent_player else ("", "")

    def _opponent_move(self, player: int, new: str, full: str) -> str:
        tried = self.opponent.candidates(new, full)
        for action in tried:
            if is_legal(self.env, player, action):
                return action
        raise OpponentStuck(
            f"envlab's scripted opponent (player {player}) found no legal move among the "
            f"{len(tried)} bracketed moves {self.game_id} showed it (turn "
            f"{len(self.moves)}): this game needs an opponent of its own; the episode is not "
            "scored"
        )

    def outcome(self) -> Outcome:
        """The game's result: its own rewards when it ended, else an unfinished game (the
        agent stopped or ran out of steps first), scored as TextArena's loss, -1."""
        if not self.done:
            return Outcome(-1.0, {}, {"reason": "the game did not end"}, finished=False)
        with self._own_random():
            closed = self.env.close()
        rewards, info = closed if isinstance(closed, tuple) else (closed, {})
        rewards = dict(rewards or {})
        raw = rewards.get(self.agent_player)
        info = dict(info or {}).get(self.agent_player, info) or {}
        if raw is None:
            return Outcome(-1.0, rewards, {"reason": "the game gave the agent no reward"}, True)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return Outcome(float(raw), rewards, dict(info))
        if not info.get("invalid_move"):
            raise GraderFailed(f"{self.game_id} ended with the reward {raw!r}, not a number")
        defect = (  # Countdown, Cryptarithm, Slitherlink, ThreeCardMonte in TextArena 0.7.4
            f"{self.game_id} gave the reward {str(raw)[:120]!r}, not a number, for the agent's "
            "invalid move (set_invalid_move called with its arguments swapped): scored as the "
            "invalid move's forfeit"
        )
        return Outcome(-1.0, rewards, dict(info), True, defect)


def scripted_trial(game_id: str, seed: int = 0, max_moves: int = 60) -> str | None:
    """Whether envlab's scripted opponent can play ``game_id``: one game of it against itself
    (both seats, at most ``max_moves`` moves). ``None`` when every turn found a legal move,
    else why not: a game that does not write enough of its moves in its text for the opponent
    to find one cannot be offered (each episode would end in the machinery's failure)."""
    run = GameRun(game_id, seed, 2, 0)
    try:
        new, full = run.start()
        me = ScriptedOpponent(seed + 1)
        while not run.done and len(run.moves) < max_moves:
            move = next((m for m in me.candidates(new, full) if is_legal(run.env, 0, m)), None)
            if move is None:
                raise OpponentStuck("the scripted player found no legal move in its text")
            new, full = run.move(move)
    except OpponentStuck as e:
        return (
            f"{game_id} cannot be played against envlab's scripted opponent: the game does not "
            f"write enough of its legal moves in its text ({e}); play it with an opponent of "
            "your own (TextArena's agents)"
        )
    return None
