"""What envlab knows of each toy-text family: action names, words for an observation, the
variants it accepts and the lowest return an episode can have (gymnasium's documented rewards).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envlab.core import ConfigError

TOY_TEXT = "gymnasium.envs.toy_text."


def _frozen_lake(env: Any, obs: Any) -> str:
    row, col = divmod(int(obs), int(env.ncol))
    tile = env.desc[row][col].decode()
    return (
        f"You are at row {row}, column {col} (from the top left, counting from 0), on tile "
        f"{tile}. Tiles: S start, F frozen, H hole (the episode ends), G goal (reward 1)."
    )


TAXI_STOPS = ("R", "G", "Y", "B")


def _taxi(env: Any, obs: Any) -> str:
    row, col, passenger, dest = env.decode(int(obs))
    where = "in the taxi" if passenger == 4 else f"waiting at {TAXI_STOPS[passenger]}"
    return (
        f"The taxi is at row {row}, column {col} (from the top left, counting from 0). The "
        f"passenger is {where}; the destination is {TAXI_STOPS[dest]}. Walls are '|'. "
        "Rewards: -1 a step, +20 for dropping the passenger at the destination, -10 for an "
        "illegal pickup or dropoff."
    )


def _cliff(env: Any, obs: Any) -> str:
    row, col = divmod(int(obs), 12)
    return (
        f"You are at row {row}, column {col} (counting from 0; x in the map). C is the cliff "
        "(-100 and back to the start), T the goal. Every step costs -1."
    )


def _blackjack(env: Any, obs: Any) -> str:
    player, dealer, ace = obs
    return (
        f"Your cards sum to {int(player)}{' (with a usable ace)' if ace else ''}; the dealer "
        f"shows {int(dealer)} (1 is an ace). Win +1, draw 0, lose -1."
    )


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    actions: tuple[str, ...]
    """Action names, by the index of the discrete action (gymnasium's documentation)."""
    intro: str
    describe: Callable[[Any, Any], str]
    variants: frozenset[str]
    """The keyword arguments of ``gymnasium.make`` envlab accepts for it (maps, slipperiness);
    reward-changing ones are refused: the declared range depends on the documented rewards."""
    worst_step: float
    """The lowest reward of one step (the worst return is ``worst_step * steps``)."""
    worst_episode: float | None = None
    """The lowest return of a whole episode, when it does not grow with its length."""
    shortest_is_best: bool = True
    render_modes: tuple[str, ...] = ("ansi",)
    max_steps: int = 100
    """The step limit when gymnasium registers none."""

    def worst(self, steps: int, variant: Mapping[str, Any]) -> float:
        if self.worst_episode is not None:
            return self.worst_episode
        return self.worst_step * steps

    def check_variant(self, env_id: str, variant: Mapping[str, Any]) -> None:
        unknown = sorted(set(variant) - self.variants)
        if unknown:
            raise ConfigError(
                f"gym:{env_id} takes the variant options {', '.join(sorted(self.variants))}; "
                f"not {', '.join(unknown)} (options that change the rewards are refused: the "
                "declared reward range is computed from gymnasium's documented rewards)"
            )


FAMILIES: dict[str, Family] = {
    "FrozenLake": Family(
        "FrozenLake",
        ("left", "down", "right", "up"),
        "Cross the frozen lake from the start S to the goal G without falling into a hole H.",
        _frozen_lake,
        frozenset({"map_name", "desc", "is_slippery", "success_rate"}),
        worst_step=0.0,
    ),
    "Taxi": Family(
        "Taxi",
        ("south", "north", "east", "west", "pickup", "dropoff"),
        "Drive the taxi to the passenger, pick them up, and drop them off at the destination.",
        _taxi,
        frozenset({"is_rainy", "fickle_passenger", "rainy_probability", "fickle_probability"}),
        worst_step=-10.0,
    ),
    "CliffWalking": Family(
        "CliffWalking",
        ("up", "right", "down", "left"),
        "Walk from the start to the goal T along the cliff C without falling.",
        _cliff,
        frozenset({"is_slippery"}),
        worst_step=-100.0,
    ),
    "Blackjack": Family(
        "Blackjack",
        ("stick", "hit"),
        "Play one hand of blackjack against the dealer: get closer to 21 without going over.",
        _blackjack,
        frozenset({"sab"}),
        worst_step=-1.0,
        worst_episode=-1.0,
        shortest_is_best=False,
        render_modes=(),
        max_steps=12,
    ),
}


def family_of(env_id: str, entry_point: str) -> str | None:
    """The family of a registered environment, if it is a toy-text one envlab plays."""
    if not entry_point.startswith(TOY_TEXT):
        return None
    return next((name for name in FAMILIES if env_id.startswith(name)), None)
