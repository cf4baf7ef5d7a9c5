"""Rewards as named, weighted components; gates; verifiable and model-judged checks side by side."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

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
    description: str = ""


@dataclass(slots=True)
class Rubric:
    """A list of components combined into one reward: weighted mean of scores, zeroed by gates."""

    components: list[Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        names = [c.name for c in self.components]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"rubric component names must be unique; repeated: {sorted(dup)}")
        for c in self.components:
            if c.weight < 0:
                raise ValueError(f"component {c.name!r} has negative weight {c.weight}")
        if self.components and not any(c.weight > 0 and not c.gate for c in self.components):
            raise ValueError("a rubric needs at least one non-gate component with positive weight")

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
            s = float(value)
            if not 0.0 <= s <= 1.0:
                raise ValueError(f"component {c.name!r} returned {s}, outside [0, 1]")
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
