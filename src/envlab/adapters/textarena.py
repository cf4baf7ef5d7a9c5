"""TextArena games as envlab environments: ``envlab eval ta:Sudoku-v0``.

The agent plays one seat of a TextArena game (``textarena.make(GAME)``), writing moves as the
game expects them (``[4]``, ``[up]``, ...); in a two-player game the other seat is a fixed,
seeded ``ScriptedOpponent``. Tasks are seeds. The reward is the game's own reward for the
agent's seat: as it is in [0, 1] for single-player games (their -1 forfeit scored 0), and
``(r + 1) / 2`` for two-player ones (``REWARD_RANGE``; docs/adapters/textarena.md).
"""

from __future__ import annotations

import random
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envlab.adapters.textarena_game import GameRun, import_textarena
from envlab.core import (
    Action,
    ConfigError,
    Environment,
    EnvSpec,
    EpisodeOrderError,
    Limits,
    Observation,
    Reward,
    StepResult,
    Task,
    TaskSet,
)

PREFIX = "ta:"
REWARD_RANGE = (-1.0, 1.0)
"""Two-player games: -1 a loss (or forfeit by invalid moves), 0 a draw, 1 a win, declared as
the task's ``reward_range``: envlab scores ``(r + 1) / 2``. Single-player games set their own
value in [0, 1] (1 solved, a completion fraction, 0 failed), scored as it is, and -1 for the
invalid-move forfeit, scored 0; any other value fails the grade (``grader_failed``)."""


class TextArenaConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    game: str
    """A TextArena environment id (``Sudoku-v0``, ``TicTacToe-v0``; ``-raw``/``-train`` too)."""
    size: int = Field(100, ge=1)
    """How many tasks (seeds) ``tasks()`` makes when not told ``n``."""
    agent_player: int = Field(0, ge=0)
    """The seat the agent plays; the others are the scripted opponent."""
    observation: Literal["new", "full"] = "new"
    """``new``: each step shows what the game said since the agent's last move (its earlier
    messages are already in the chat); ``full``: TextArena's whole observation, as it is."""


def seats(game: str) -> int:
    """How many players ``game`` is played with here: 1 if it accepts one, else 2."""
    ta = import_textarena()
    outer = random.getstate()  # TextArena seeds the global RNG: leave it as it was
    try:
        for n in (1, 2):
            env = ta.make(game)
            try:
                env.reset(num_players=n, seed=0)
                return n
            except (AssertionError, ValueError, KeyError, IndexError, TypeError):
                continue
    finally:
        random.setstate(outer)
    raise ConfigError(
        f"TextArena game {game!r} cannot be played by 1 or 2 players; envlab plays single-player "
        "games and two-player ones against a scripted opponent (envlab.adapters.textarena.catalog)"
    )


class TextArenaEpisode(Environment):
    """One game: ``reset`` shows the agent its first turn, each step is one move, the game's
    end ends the episode; ``grade`` reads the game's own reward."""

    def __init__(self, spec: TextArenaEnv) -> None:
        self.spec = spec
        self.game: GameRun | None = None
        self.task: Task | None = None

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        if self.task is not None:
            raise EpisodeOrderError("reset() called twice: ask the spec for a fresh episode")
        self.task = task
        m = task.metadata
        self.game = GameRun(m["game"], m["seed"], m["players"], self.spec.config.agent_player)
        new, full = self.game.start()
        return Observation(text=self._shown(new, full))

    def _shown(self, new: str, full: str) -> str:
        return full if self.spec.config.observation == "full" else new.lstrip("\n")

    async def step(self, action: Action) -> StepResult:
        if self.game is None:
            raise EpisodeOrderError("step() called before reset(); call reset(task) first")
        if self.game.done:
            raise EpisodeOrderError("step() called after the game ended")
        new, full = self.game.move(action.text)
        return StepResult(Observation(text=self._shown(new, full)), 0.0, done=self.game.done)

    async def grade(self) -> Reward:
        if self.game is None:
            raise EpisodeOrderError("grade() called before reset(): there is no game to grade")
        out = self.game.outcome()
        details: dict[str, Any] = {
            "finished": out.finished,
            "rewards": {str(k): v for k, v in out.rewards.items()},
            "reason": out.game_info.get("reason"),
            "invalid_move": out.game_info.get("invalid_move"),
        }
        details["raw_reward"] = out.reward
        score = out.reward
        if self.game.num_players == 1 and score == -1.0:
            score = 0.0  # single-player: the invalid-move forfeit is a failure, scored 0
        return Reward(total=score, components={"game_reward": score}, details=details)

    async def regrade(self) -> Reward:
        return await self.grade()

    def state(self) -> dict[str, Any]:
        if self.game is None:
            return {}
        return {
            "game": self.game.game_id,
            "seed": self.game.seed,
            "done": self.game.done,
            "moves": [list(m) for m in self.game.moves],
        }

    def system_prompt(self) -> str:
        return (
            "You are playing a text game. Reply to each turn with your move in the format the "
            "game asks for (usually in square brackets, such as [4])."
        )

    def oracle_actions(self, task: Task) -> list[Action]:
        return []  # TextArena games have no reference solution to replay


class TextArenaEnv(EnvSpec):
    """TextArena games: ``ta:GAME`` (``--env-arg game=GAME``); tasks are seeds."""

    id = "textarena"
    description = "TextArena games (ta:GAME); two-player ones against a scripted opponent."
    Config = TextArenaConfig
    environment = TextArenaEpisode
    default_limits = Limits(max_steps=300, step_timeout_s=120.0, episode_timeout_s=1800.0)
    config: TextArenaConfig

    def __init__(self, config: Any = None, **values: Any) -> None:
        super().__init__(config, **values)
        ta = import_textarena()
        from textarena.envs.registration import ENV_REGISTRY

        if self.config.game not in ENV_REGISTRY:
            raise ConfigError(
                f"TextArena {ta.__version__} has no game {self.config.game!r}; see "
                "`python -m envlab.adapters.textarena` for the games it has"
            )
        self.players = seats(self.config.game)
        if self.config.agent_player >= self.players:
            raise ConfigError(f"{self.name} has {self.players} seat(s); agent_player must be less")

    @property
    def name(self) -> str:
        return PREFIX + self.config.game

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        count = self.config.size if n is None else n
        base = {"train": 1_000_000, "validation": 2_000_000}.get(split, 0) + seed * 10_000
        tasks = []
        for i in range(count):
            game_seed = base + i
            run = GameRun(self.config.game, game_seed, self.players, self.config.agent_player)
            new, full = run.start()
            tasks.append(
                Task(
                    id=f"{self.config.game}-seed{game_seed}",
                    prompt=full if self.config.observation == "full" else new.lstrip("\n"),
                    metadata={
                        "game": self.config.game,
                        "seed": game_seed,
                        "players": self.players,
                        **({"reward_range": list(REWARD_RANGE)} if self.players == 2 else {}),
                    },
                    split=split,
                )
            )
        return TaskSet(tasks, seed=seed, name=self.name)


def load_textarena_env(name: str, **kwargs: Any) -> TextArenaEnv:
    """TextArena games as ta:GAME (ta:Sudoku-v0, ta:TicTacToe-v0 vs a scripted opponent)."""
    return TextArenaEnv(game=name.removeprefix(PREFIX), **kwargs)


class CatalogEntry(BaseModel):
    name: str
    loaded: bool
    players: int | None = None
    reason: str = ""
    seconds: float = 0.0


def catalog(include_variants: bool = False) -> list[CatalogEntry]:
    """Every game TextArena registers (without its ``-raw``/``-train`` wrapper variants unless
    asked), each loaded (made, reset, shown to the agent) or failed with the reason."""
    try:
        import_textarena()
    except ConfigError as e:
        return [CatalogEntry(name=PREFIX + "*", loaded=False, reason=str(e))]
    from textarena.envs.registration import ENV_REGISTRY

    entries = []
    for game in ENV_REGISTRY:
        if not include_variants and game.endswith(("-raw", "-train")):
            continue
        entries.append(_try_game(game))
    return entries


def _try_game(game: str) -> CatalogEntry:
    t = time.perf_counter()
    try:
        spec = TextArenaEnv(game=game)
        spec.tasks(n=1)
    except Exception as e:  # a game that needs a download, a corpus, an API key
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return CatalogEntry(
            name=PREFIX + game, loaded=False, reason=reason, seconds=time.perf_counter() - t
        )
    return CatalogEntry(
        name=PREFIX + game, loaded=True, players=spec.players, seconds=time.perf_counter() - t
    )


if __name__ == "__main__":  # python -m envlab.adapters.textarena: the catalogue as JSON lines
    for entry in catalog():
        print(entry.model_dump_json())
