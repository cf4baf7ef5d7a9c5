"""``tau-retail`` and ``tau-airline``: τ-bench's domains as envlab environments.

envlab eval tau-retail --agent openai:MODEL@URL              # τ-bench's reward, scripted user
envlab eval tau-airline -c reward=strict -c user=model -c user_model=openai:M@URL
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envlab.core import ConfigError, EnvSpec, Limits, Rubric, Task, TaskSet
from envlab.envs.tau.airline import AIRLINE_SCHEMA, AirlineTools
from envlab.envs.tau.db import Changes, Database, data_file, load_json
from envlab.envs.tau.episode import TauEpisode
from envlab.envs.tau.retail import RETAIL_SCHEMA, RetailTools
from envlab.envs.tau.strict import RUBRICS, gradable
from envlab.envs.tau.users import ScriptedUser, UserSimulator


class TauConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: Literal["tau", "strict"] = "tau"
    """``tau``: τ-bench's reward; ``strict``: envlab's, with gates (``envs/tau/strict.py``)."""
    user: Literal["scripted", "model"] = "scripted"
    user_model: str | None = None
    """The model-backed user's model, ``openai:MODEL@URL`` (with ``user=model``)."""
    user_temperature: float = Field(0.0, ge=0.0)
    user_max_tokens: int = Field(256, ge=1)
    max_user_turns: int = Field(20, ge=1)


class RetailEpisode(TauEpisode, RetailTools):
    domain = "retail"
    schema = RETAIL_SCHEMA


class AirlineEpisode(TauEpisode, AirlineTools):
    domain = "airline"
    schema = AIRLINE_SCHEMA


class TauSpec(EnvSpec):
    """A τ domain: tasks of its splits, the policy as system prompt, a simulated user."""

    Config = TauConfig
    config: TauConfig
    environment: ClassVar[type[TauEpisode]]
    splits: ClassVar[tuple[str, ...]]
    default_limits = Limits(max_steps=60, step_timeout_s=300.0, episode_timeout_s=1800.0)

    def __init__(self, config: Any = None, **values: Any) -> None:
        super().__init__(config, **values)
        if self.config.user == "model" and not self.config.user_model:
            raise ConfigError(
                "user=model needs user_model=openai:MODEL@URL (the user's model endpoint)"
            )
        self._policy: str | None = None

    @property
    def domain(self) -> str:
        return self.environment.domain

    @property
    def policy(self) -> str:
        if self._policy is None:
            self._policy = data_file(self.domain, "policy.md").decode()
        return self._policy

    @property
    def rubric(self) -> Rubric:
        return RUBRICS[self.config.reward]

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        if split not in self.splits:
            raise ConfigError(
                f"{self.name} has no split {split!r}; its splits: {', '.join(self.splits)}"
            )
        writes = sorted(n for n, s in self.environment.tool_specs.items() if s.writes)
        rows = load_json(self.domain, f"tasks_{split}.json")
        golds = gold_changes(self.environment, split)
        tasks = [_task(self.name, split, r, writes, g) for r, g in zip(rows, golds, strict=True)]
        if self.config.reward == "strict":  # nothing to check: see strict.gradable
            tasks = [t for t in tasks if gradable(t)]
        return TaskSet(tasks[:n], seed=seed, name=self.name)

    def make_user(self, task: Task, seed: int | None) -> UserSimulator:
        cfg = self.config
        if cfg.user == "scripted":
            return ScriptedUser(task.metadata["instruction"], max_turns=cfg.max_user_turns)
        from envlab.envs.tau.model_user import ModelUser

        assert cfg.user_model is not None
        return ModelUser.from_spec(
            cfg.user_model,
            task.metadata["instruction"],
            temperature=cfg.user_temperature,
            max_tokens=cfg.user_max_tokens,
            seed=seed,
            max_turns=cfg.max_user_turns,
        )


@cache
def gold_changes(environment: type[TauEpisode], split: str) -> tuple[Changes, ...]:
    """The records each task's gold actions change, found as τ-bench finds its gold database to
    grade (``tau_bench/envs/base.py`` ``calculate_reward``: the gold actions replayed on fresh
    data): with every type as τ-bench's tools leave it. The shipped ``gold_diff`` is the same
    up to Python's ``==``, which misses a value that changed only its type (retail train 8: a
    refund of 0.0 turns a gift card's balance 9 into 9.0, which τ-bench's hash tells apart)."""
    domain = environment.domain
    out = []
    for row in load_json(domain, f"tasks_{split}.json"):
        tools = environment()
        tools.db = Database(domain, environment.schema)
        for action in row["actions"]:
            tools.call(action["name"], action["kwargs"])
        out.append(tools.db.changes())
        tools.db.close()
    return tuple(out)


def _task(env: str, split: str, row: dict[str, Any], writes: list[str], gold: Changes) -> Task:
    return Task(
        id=f"{env}-{split}-{row['index']:03d}",
        prompt=row["instruction"],
        answer={
            # each gold action with whether τ-bench's own tool refused it (an "Error: ..." result)
            "actions": [
                {**a, "refused": r.startswith("Error")}
                for a, r in zip(row["actions"], row["gold_tool_results"], strict=True)
            ],
            "outputs": row["outputs"],
            "gold_diff": gold,
        },
        metadata={
            "user_id": row["user_id"],
            "instruction": row["instruction"],
            "index": row["index"],
            "write_tools": writes,
        },
        split=split,
    )


class TauRetail(TauSpec):
    """τ-bench retail: orders, exchanges, returns and addresses of an online shop's customers."""

    id = "tau-retail"
    description = "τ-bench retail on SQLite: tools, policy, a simulated user; tau/strict reward."
    environment = RetailEpisode
    splits = ("test", "train", "dev")


class TauAirline(TauSpec):
    """τ-bench airline: bookings, changes, cancellations, baggage and compensation."""

    id = "tau-airline"
    description = "τ-bench airline on SQLite: tools, policy, a simulated user; tau/strict reward."
    environment = AirlineEpisode
    splits = ("test",)
