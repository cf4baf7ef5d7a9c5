"""One TextArena game played to its end: the agent's player, a scripted opponent, isolated RNG.

No envlab contract here: ``GameRun`` drives ``textarena.make(...)`` exactly as TextArena's own
loop does (``reset`` / ``get_observation`` / ``step`` / ``close``), so the differential tests can
replay the same moves through it and through TextArena directly.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from envlab.core import ConfigError

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


class ScriptedOpponent:
    """The fixed opponent of two-player games: a seeded random choice among the moves written
    in brackets in what it was last shown (the ``Available Moves: '[0]', '[4]'`` lists many
    TextArena games print), else among all it was shown, else the empty move (which the game
    treats as its invalid move). Deterministic in ``seed``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"envlab-textarena-opponent:{seed}")

    def act(self, new_text: str, full_text: str) -> str:
        candidates = BRACKETED.findall(new_text) or BRACKETED.findall(full_text)
        return self.rng.choice(candidates) if candidates else ""


@dataclass
class Outcome:
    """How the game ended, as TextArena reported it (``env.close()``)."""

    reward: float
    """The agent's player's reward, as the game set it (TextArena's range: [-1, 1])."""
    rewards: dict[int, float]
    game_info: dict[str, Any] = field(default_factory=dict)
    finished: bool = True


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
            return self._to_agent_turn()

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
            action = self.opponent.act(new, full)
            self.moves.append((player, action))
            self.done, _ = self.env.step(action=action)
        player, new, full = self._observe()  # what the game said last (the outcome)
        return (new, full) if player == self.agent_player else ("", "")

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
        return Outcome(float(raw), rewards, dict(info))
