"""gymnasium's toy-text family as tool environments: ``envlab eval gym:FrozenLake-v1``.

Each environment of ``gymnasium.envs.toy_text`` (FrozenLake, Taxi, CliffWalking, Blackjack) is
``gym:ENV_ID``: the agent sees the environment's own text rendering (its ``ansi`` render, colour
codes removed) with a description of the observation in words, and plays with one tool, ``act``,
whose argument names an action of the discrete action space (``left``, ``pickup``, ``hit``...).
A task is a seed: the episode is ``gymnasium.make(ENV_ID, **variant).reset(seed=SEED)``.

The reward is the episode's own return ``G`` (the sum of the environment's rewards), declared with
the task's range ``[worst, best]`` (``metadata["reward_range"]``) so that envlab normalises it
to ``(G - worst) / (best - worst)``: ``worst`` is the lowest return any episode can have within
the step limit, ``best`` the best return of this seed, found by playing copies of the
environment (``gymnasium_search``). An episode the agent leaves before it ends (terminated, or
truncated at the step limit) scores ``worst``. Seeds where no play beats ``worst`` (a slippery
lake that always drowns, a hand that always loses) are skipped: no action matters there.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envlab.adapters.catalog import CatalogEntry
from envlab.adapters.gymnasium_families import FAMILIES, Family, family_of
from envlab.adapters.gymnasium_search import Plan, best_plan
from envlab.core import (
    Action,
    ConfigError,
    EnvSpec,
    GraderFailed,
    Limits,
    Reward,
    Rubric,
    Task,
    TaskSet,
    ToolCall,
    ToolEnv,
)
from envlab.core.tools import tool

PREFIX = "gym:"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def import_gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError as e:
        raise ConfigError(
            f"gym:ENV environments need gymnasium ({e}); install it with pip install 'envlab[gym]'"
        ) from None
    return gymnasium


def env_ids() -> list[str]:
    """The toy-text environments gymnasium registers that envlab plays (newest versions)."""
    gym = import_gymnasium()
    return sorted(k for k, s in gym.registry.items() if family_of(k, str(s.entry_point)))


class GymConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    env_id: str
    size: int = Field(100, ge=1, description="tasks (seeds) per split")
    max_episode_steps: int | None = Field(
        None, ge=1, description="the step limit (default: gymnasium's registered one)"
    )
    variant: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments of gymnasium.make: map_name, is_slippery, desc, ...",
    )


class GymEpisode(ToolEnv):
    """One seeded episode of a toy-text environment, played with the ``act`` tool."""

    rubric = Rubric()  # graded by score(), as task folders are: no rubric components
    spec: GymTextEnv

    def __init__(self, spec: GymTextEnv | None = None) -> None:
        super().__init__(spec)
        self.env: Any = None
        self.obs: Any = None
        self.ret = 0.0
        self.terminated = self.truncated = False
        self.actions: list[int] = []

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.env = self.spec.make()
        self.obs, _ = self.env.reset(seed=int(task.metadata["seed"]))

    def prompt(self, task: Task) -> str:
        fam = self.spec.family
        return f"{fam.intro}\n\n{self.spec.show(self.env, self.obs)}"

    def system_prompt(self) -> str:
        names = ", ".join(self.spec.family.actions)
        return (
            "You are playing a gymnasium environment through text. Call the tool act with one "
            f"action ({names}) per call until the episode ends."
        )

    def play(self, name: str) -> str:
        """One step of the environment with the action called ``name``."""
        fam = self.spec.family
        action = fam.actions.index(name)
        self.obs, reward, self.terminated, self.truncated, _ = self.env.step(action)
        self.ret += float(reward)
        self.actions.append(action)
        text = f"{self.spec.show(self.env, self.obs)}\nreward {reward:g}, return {self.ret:g}"
        if self.terminated or self.truncated:
            self.done = True
            why = "terminated" if self.terminated else "truncated at the step limit"
            text += f"\nThe episode is over ({why})."
        return text

    async def score(self) -> Reward:
        if self.task is None:
            raise GraderFailed("grade() before reset(): there is no episode to grade")
        ended = self.terminated or self.truncated
        worst = float(self.task.metadata["reward_range"][0])
        total = self.ret if ended else worst
        details = {"return": self.ret, "ended": ended, "steps": len(self.actions)}
        return Reward(total=total, components={"return": total}, details=details)

    def overrun_reward(self) -> Reward | None:
        if self.tool_overrun is None or self.task is None:
            return None
        worst = float(self.task.metadata["reward_range"][0])
        return Reward(total=worst, components={"return": worst}, details={"overrun": True})

    def oracle_actions(self, task: Task) -> list[Action]:
        plan = self.spec.plan(int(task.metadata["seed"]))
        names = [self.spec.family.actions[a] for a in plan.actions]
        return [Action(tool_calls=[ToolCall("act", {"action": n}, id=f"o{i}")]) for i, n in
                enumerate(names)] + [Action(text="done")]  # fmt: skip

    def state(self) -> dict[str, Any]:
        obs = self.obs.tolist() if hasattr(self.obs, "tolist") else self.obs
        return {**super().state(), "observation": obs, "return": self.ret,
                "terminated": self.terminated, "truncated": self.truncated,
                "actions": list(self.actions)}  # fmt: skip


class FrozenLakeEpisode(GymEpisode):
    @tool
    def act(self, action: Literal["left", "down", "right", "up"]) -> str:
        """Move one square on the lake (on a slippery lake you may slide sideways).

        Args:
            action: the direction to move.
        """
        return self.play(action)


class TaxiEpisode(GymEpisode):
    @tool
    def act(self, action: Literal["south", "north", "east", "west", "pickup", "dropoff"]) -> str:
        """Drive the taxi one square, or pick up or drop off the passenger.

        Args:
            action: the move.
        """
        return self.play(action)


class CliffWalkingEpisode(GymEpisode):
    @tool
    def act(self, action: Literal["up", "right", "down", "left"]) -> str:
        """Walk one square.

        Args:
            action: the direction to walk.
        """
        return self.play(action)


class BlackjackEpisode(GymEpisode):
    @tool
    def act(self, action: Literal["stick", "hit"]) -> str:
        """Stick (stop and let the dealer play) or hit (take another card).

        Args:
            action: what to do.
        """
        return self.play(action)


EPISODES: dict[str, type[GymEpisode]] = {
    "FrozenLake": FrozenLakeEpisode,
    "Taxi": TaxiEpisode,
    "CliffWalking": CliffWalkingEpisode,
    "Blackjack": BlackjackEpisode,
}


class GymTextEnv(EnvSpec):
    """gymnasium toy-text environments as gym:ENV_ID (FrozenLake, Taxi, CliffWalking...)."""

    id = "gym"
    description = "gymnasium toy-text environments (gym:ENV_ID), played with an act tool."
    Config = GymConfig
    environment = GymEpisode
    config: GymConfig

    def __init__(self, config: Any = None, **values: Any) -> None:
        super().__init__(config, **values)
        gym = import_gymnasium()
        env_id = self.config.env_id
        if env_id not in env_ids():
            raise ConfigError(
                f"gym:{env_id} is not a toy-text environment of gymnasium {gym.__version__}; "
                f"envlab plays {', '.join(PREFIX + e for e in env_ids())}"
            )
        self.family: Family = FAMILIES[family_of(env_id, str(gym.spec(env_id).entry_point))]
        self.family.check_variant(env_id, self.config.variant)
        registered = gym.spec(env_id).max_episode_steps
        self.max_steps = self.config.max_episode_steps or registered or self.family.max_steps
        self.worst = self.family.worst(self.max_steps, self.config.variant)
        self._plans: dict[int, Plan] = {}

    @property
    def name(self) -> str:
        return PREFIX + self.config.env_id

    def new_episode(self) -> GymEpisode:
        return EPISODES[self.family.name](self)

    def code(self) -> Any:
        yield from super().code()
        yield from EPISODES.values()
        yield type(self.family)

    def limits(self, task: Task) -> Limits:
        return Limits(max_steps=self.max_steps + 2)

    def make(self) -> Any:
        """A fresh ``gymnasium.make`` of this environment, its variant and step limit."""
        import gymnasium

        mode = "ansi" if "ansi" in self.family.render_modes else None
        kwargs = {**self.config.variant, "max_episode_steps": self.max_steps}
        return gymnasium.make(self.config.env_id, render_mode=mode, **kwargs)

    def show(self, env: Any, obs: Any) -> str:
        """The observation as text: the environment's own render (colours removed), if it
        renders text, and the observation in words."""
        grid = ANSI.sub("", env.render()).strip("\n") if env.render_mode == "ansi" else ""
        words = self.family.describe(env.unwrapped, obs)
        return f"{grid}\n{words}" if grid else words

    def plan(self, seed: int) -> Plan:
        """The best play of the episode with ``seed`` (searched once per spec)."""
        if seed not in self._plans:
            env = self.make()
            env.reset(seed=seed)
            n = int(env.action_space.n)
            self._plans[seed] = best_plan(
                env.unwrapped, n, self.max_steps, self.worst, self.family.shortest_is_best
            )
        return self._plans[seed]

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        count = self.config.size if n is None else n
        base = {"train": 1_000_000, "validation": 2_000_000}.get(split, 0) + seed * 10_000
        tasks: list[Task] = []
        s = base
        while len(tasks) < count and s < base + 10_000:
            plan = self.plan(s)
            if plan.best > self.worst:  # a seed where what the agent does matters
                tasks.append(self._task(s, plan, split))
            s += 1
        return TaskSet(tasks, seed=seed, name=self.name)

    def _task(self, seed: int, plan: Plan, split: str) -> Task:
        episode = self.new_episode()
        episode.env = self.make()
        episode.obs, _ = episode.env.reset(seed=seed)
        meta = {"env_id": self.config.env_id, "seed": seed,
                "reward_range": [self.worst, plan.best], "max_steps": self.max_steps}  # fmt: skip
        task = Task(id=f"{self.config.env_id}-seed{seed}", prompt="", metadata=meta, split=split)
        return task.model_copy(update={"prompt": episode.prompt(task)})


def gymnasium_env(name: str, **config: Any) -> GymTextEnv:
    """gymnasium toy-text environments as gym:ENV_ID (FrozenLake, Taxi, CliffWalking, Blackjack)."""
    return GymTextEnv(env_id=name.removeprefix(PREFIX), **config)


def catalog(tasks: int = 2) -> list[CatalogEntry]:
    """Every toy-text environment as ``gym:ENV_ID``, each tried (its first ``tasks`` tasks made,
    their best play searched): loaded, or failed with the reason."""
    try:
        ids = env_ids()
    except ConfigError as e:
        return [CatalogEntry(name=PREFIX + "*", loaded=False, reason=str(e))]
    out = []
    for env_id in ids:
        t = time.perf_counter()
        try:
            gymnasium_env(PREFIX + env_id).tasks(n=tasks)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}".strip().splitlines()[0][:400]
            out.append(CatalogEntry(name=PREFIX + env_id, loaded=False, reason=reason,
                                    seconds=time.perf_counter() - t))  # fmt: skip
            continue
        out.append(CatalogEntry(name=PREFIX + env_id, loaded=True, seconds=time.perf_counter() - t))
    return out


if __name__ == "__main__":  # python -m envlab.adapters.gymnasium_text: the catalogue, JSON lines
    for item in catalog():
        print(item.model_dump_json())
