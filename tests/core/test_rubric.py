from __future__ import annotations

import pytest

from envlab.core import Component, ConfigError, GraderFailed, Rubric


async def test_weighted_mean_and_gate() -> None:
    async def judge(ctx: dict[str, float]) -> float:
        return ctx["style"]

    rubric = Rubric(
        [
            Component("correct", lambda c: c["correct"], weight=3),
            Component("style", judge, weight=1, kind="judge"),
            Component("safe", lambda c: c["safe"], gate=True),
        ]
    )
    r = await rubric.score({"correct": 1.0, "style": 0.5, "safe": 1.0})
    assert r.total == pytest.approx((3 * 1 + 1 * 0.5) / 4)
    assert r.components == {"correct": 1.0, "style": 0.5, "safe": 1.0}
    assert r.details["kinds"]["style"] == "judge"
    gated = await rubric.score({"correct": 1.0, "style": 1.0, "safe": 0.0})
    assert gated.total == 0.0 and gated.gated_by == "safe"
    assert gated.components["correct"] == 1.0  # evidence is kept


async def test_rubric_rejects_bad_definitions_and_scores() -> None:
    with pytest.raises(ConfigError, match="unique"):
        Rubric([Component("a", lambda c: 1), Component("a", lambda c: 1)])
    with pytest.raises(ConfigError, match="non-gate"):
        Rubric([Component("g", lambda c: 1, gate=True)])
    # a score the component cannot give is a failed grade (the engine regrades, then scores 0)
    with pytest.raises(GraderFailed, match="outside"):
        await Rubric([Component("a", lambda c: 2.0)]).score(None)
    with pytest.raises(GraderFailed, match="not a finite number"):
        await Rubric([Component("a", lambda c: float("nan"))]).score(None)
    with pytest.raises(GraderFailed, match="not a number"):
        await Rubric([Component("a", lambda c: "1")]).score(None)
