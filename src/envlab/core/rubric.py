"""Rewards as named, weighted components; gates; verifiable and model-judged checks side by side."""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from envlab.core.errors import ConfigError, GraderFailed

CheckKind = Literal["verifiable", "judge"]


class Reward(BaseModel):
    """The grade of one episode: a total and the named components it came from."""

    total: float
    components: dict[str, float] = Field(default_factory=dict)
    gated_by: str | None = None
    """Name of the gate component that forced the total to 0, if any."""
    details: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Component:
    """One named check. ``fn(ctx)`` returns a score in [0, 1] (sync or async).

    A gate contributes no weight; when its score is below ``threshold`` the total is 0
    (e.g. a safety violation or a broken output format).
    """

    name: str
    fn: Callable[[Any], float | bool | Awaitable[float | bool]]
    weight: float = 1.0
    kind: CheckKind = "verifiable"
    gate: bool = False
    threshold: float = 1.0
    """A gate fires when the score is below this: in (0, 1] (a score is in [0, 1])."""
    description: str = ""

    def __post_init__(self) -> None:
        """Refuse, when the rubric is written, a component that cannot do what it says."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"a rubric component needs a non-empty name, got {self.name!r}")
        what = f"rubric component {self.name!r}"
        if not callable(self.fn):
            raise ConfigError(f"{what}: fn must be a function of the grading context, got "
                              f"{type(self.fn).__name__}")  # fmt: skip
        if self.kind not in ("verifiable", "judge"):
            raise ConfigError(f"{what}: kind is {self.kind!r}; use 'verifiable' or 'judge'")
        weight = _number(self.weight, f"{what}: weight")
        if weight < 0:
            raise ConfigError(
                f"{what} has negative weight {self.weight}: the total is a weighted mean of "
                "scores in [0, 1] and a negative weight can push it outside; use a weight >= 0 "
                "(0 records the score without counting it), or a gate to zero the total"
            )
        threshold = _number(self.threshold, f"{what}: threshold")
        if self.gate and threshold <= 0:
            raise ConfigError(
                f"gate {self.name!r} has threshold {self.threshold}: a score in [0, 1] is never "
                "below it, so the gate never fires; use a threshold in (0, 1] (1.0: the gate "
                "needs a full score; 0.5: at least half)"
            )
        if self.gate and threshold > 1:
            raise ConfigError(
                f"gate {self.name!r} has threshold {self.threshold}: a score in [0, 1] is always "
                "below it, so every episode scores 0; use a threshold in (0, 1]"
            )
        if not self.gate and threshold != 1.0:
            raise ConfigError(
                f"{what} sets threshold={self.threshold} but is not a gate, so the threshold "
                "is ignored; pass gate=True to make it a gate, or drop threshold"
            )


@dataclass(slots=True)
class Rubric:
    """A list of components combined into one reward: weighted mean of scores, zeroed by gates."""

    components: list[Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        names = [c.name for c in self.components]
        bad = [c for c in self.components if not isinstance(c, Component)]
        if bad:
            raise ConfigError(
                f"a rubric is a list of Component, got {type(bad[0]).__name__}: wrap each "
                "check as Component(name, fn, ...)"
            )
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(
                f"rubric component names must be unique; repeated: {sorted(dup)}; rename them"
            )
        if self.components and not any(c.weight > 0 and not c.gate for c in self.components):
            listed = ", ".join(
                f"{c.name} ({'gate' if c.gate else f'weight {c.weight:g}'})"
                for c in self.components
            )
            raise ConfigError(
                "a rubric needs at least one non-gate component with positive weight, or no "
                f"total can reach 1 (it is always 0); its components: {listed}. Give a scored "
                "component a weight > 0 (gates only zero the total)"
            )

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"name": c.name, "weight": c.weight, "kind": c.kind, "gate": c.gate}
            for c in self.components
        ]

    async def score(self, ctx: Any) -> Reward:
        scores: dict[str, float] = {}
        for c in self.components:
            value = c.fn(ctx)
            if inspect.isawaitable(value):
                value = await value
            s = finite_number(value, f"the score of component {c.name!r}")
            if not 0.0 <= s <= 1.0:
                raise GraderFailed(f"component {c.name!r} returned {s}, outside [0, 1]")
            scores[c.name] = s
        return self.combine(scores)

    def combine(self, scores: dict[str, float]) -> Reward:
        gated_by = None
        for c in self.components:
            if c.gate and scores[c.name] < c.threshold:
                gated_by = c.name
                break
        weighted = [(c.weight, scores[c.name]) for c in self.components if not c.gate]
        wsum = sum(w for w, _ in weighted)
        total = sum(w * s for w, s in weighted) / wsum if wsum else 0.0
        if gated_by is not None:
            total = 0.0
        kinds = {c.name: c.kind for c in self.components}
        return Reward(total=total, components=scores, gated_by=gated_by, details={"kinds": kinds})


def _number(value: object, where: str) -> float:
    """``value`` as a float if it is a finite int or float (not a bool); else ``ConfigError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where} is {value!r}; it must be a finite number")
    return float(value)


def finite_number(value: object, where: str) -> float:
    """``value`` as a float if it is a finite int or float (not a bool); else ``GraderFailed``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GraderFailed(f"{where} is {value!r}, not a number")
    x = float(value)
    if not math.isfinite(x):
        raise GraderFailed(f"{where} is {value!r}, not a finite number")
    return x


def validate_reward(reward: Reward, reward_range: tuple[float, float] | None = None) -> Reward:
    """The one rule for a valid grade: the total and every component a finite number in
    ``reward_range`` (default [0, 1]); returned normalised to [0, 1]. Anything else raises
    ``GraderFailed`` naming the value: it is never scored as given and never excluded."""
    if reward_range is None and _already_valid(reward):
        return reward  # what normalising to [0, 1] would build is equal to it
    low, high = reward_range if reward_range is not None else (0.0, 1.0)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise GraderFailed(f"the task declares reward_range {reward_range!r}; it needs low < high")

    def norm(value: object, where: str) -> float:
        x = finite_number(value, where)
        if not low - 1e-9 <= x <= high + 1e-9:
            raise GraderFailed(f"{where} is {value!r}, outside the reward range [{low}, {high}]")
        return min(1.0, max(0.0, (x - low) / (high - low)))

    components = {k: norm(v, f"reward component {k!r}") for k, v in reward.components.items()}
    total = norm(reward.total, "the reward total")
    # every value was checked just now: build the result without validating it again
    return Reward.model_construct(
        total=total, components=components, gated_by=reward.gated_by, details=reward.details
    )


def _already_valid(reward: Reward) -> bool:
    """A plain ``Reward`` whose total and components are floats in [0, 1] already (not NaN,
    not a bool, not -0.0, nothing to clamp): normalising it to [0, 1] changes no value."""
    if type(reward) is not Reward or not _unit_float(reward.total):
        return False
    return all(map(_unit_float, reward.components.values()))


def _unit_float(x: object) -> bool:
    if type(x) is not float or not 0.0 <= x <= 1.0:
        return False
    return x != 0.0 or math.copysign(1.0, x) > 0


def reward_range_of(metadata: dict[str, Any]) -> tuple[float, float] | None:
    """The range a task declares in ``metadata["reward_range"]`` (``[low, high]``), if any."""
    declared = metadata.get("reward_range")
    if declared is None:
        return None
    try:
        low, high = (float(x) for x in declared)
    except (TypeError, ValueError):
        raise GraderFailed(
            f"task metadata reward_range is {declared!r}; write it as [low, high]"
        ) from None
    return low, high
