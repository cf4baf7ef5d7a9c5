"""The one rule for a valid grade, as the episode driver applies it to any environment.

A grade counts only when it is a finite number in [0, 1] (or the task's declared range,
normalised), every component too, from a grader that finished on its own. An invalid grade is
run once more (``regrade``); invalid twice, the episode scores 0 with ``grader_failed`` (status
ok, counted, never excluded). Only an ``InfraError`` of the grading machinery is excluded.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from envlab.core import (
    Action,
    Environment,
    EnvSpec,
    GraderFailed,
    InfraError,
    Observation,
    Reward,
    Status,
    StepResult,
    Task,
    TaskSet,
    Trajectory,
)
from envlab.measure.summary import summarize
from tests.support.envs import ScriptAgent
from tests.support.play import play

HANG = "hang"
Outcome = float | Reward | BaseException | str | None


class ScriptedGraderConfig(BaseModel):
    steps: int = 1
    step_reward: float = 0.0
    metadata: dict[str, Any] = {}


class ScriptedGraderEpisode(Environment):
    """One episode of ``ScriptedGraderEnv``: its grades come from the spec's script."""

    def __init__(self, spec: ScriptedGraderEnv) -> None:
        self.spec = spec
        self._n = 0

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        return Observation(text=task.prompt)

    async def step(self, action: Action) -> StepResult:
        self._n += 1
        cfg = self.spec.config
        return StepResult(
            Observation(text="noted"), reward=cfg.step_reward, done=self._n >= cfg.steps
        )

    async def _play(self, name: str) -> Reward | None:
        ScriptedGraderEnv.calls.append(name)
        if not self.spec.outcomes:
            raise AssertionError(f"{name}() called more often than the test scripted")
        outcome = self.spec.outcomes.pop(0)
        if outcome == HANG:
            await asyncio.sleep(3600)
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, int | float):
            return Reward(total=outcome)
        assert outcome is None or isinstance(outcome, Reward)
        return outcome

    async def grade(self) -> Reward | None:
        return await self._play("grade")

    async def regrade(self) -> Reward | None:
        return await self._play("regrade")


class ScriptedGraderEnv(EnvSpec):
    """Episodes of ``steps`` steps (each rewarding ``step_reward``), whose successive calls to
    ``grade``/``regrade`` (counted across the fresh episodes the spec makes) play ``outcomes``:
    a number or ``Reward`` is returned, an exception raised, ``"hang"`` never returns, ``None``
    means "sum the step rewards"."""

    id = "scripted-grader"
    Config = ScriptedGraderConfig
    environment = ScriptedGraderEpisode
    config: ScriptedGraderConfig
    calls: ClassVar[list[str]] = []

    def __init__(self, outcomes: list[Outcome], **config: Any) -> None:
        super().__init__(**config)
        self.outcomes = outcomes  # shared by every episode of this spec: one script per test

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet([Task(id="only", prompt="do it", metadata=self.config.metadata)])


async def run(env: ScriptedGraderEnv, max_retries: int = 0, **limits: Any) -> Trajectory:
    ScriptedGraderEnv.calls.clear()
    return await play(env, ScriptAgent([]), max_retries=max_retries, **limits)


def assert_grader_failed(t: Trajectory) -> None:
    assert t.status is Status.OK, (t.status, t.error)
    assert t.reward == 0.0 and t.scored
    assert t.grader_failed, "an invalid grade must say why in grader_failed"


async def test_a_grade_that_fails_once_is_scored_with_the_second() -> None:
    t = await run(ScriptedGraderEnv([GraderFailed("reward.txt missing"), 0.75]))
    assert t.status is Status.OK and t.reward == 0.75
    assert t.grader_failed is None
    assert ScriptedGraderEnv.calls == ["grade", "regrade"]


async def test_a_grade_that_fails_twice_scores_zero_and_is_counted() -> None:
    t = await run(ScriptedGraderEnv([GraderFailed("killed by signal 9"), GraderFailed("again")]))
    assert_grader_failed(t)
    assert "killed by signal 9" in (t.grader_failed or "") or "again" in (t.grader_failed or "")
    assert ScriptedGraderEnv.calls == ["grade", "regrade"], "one regrade, no more"
    assert t.attempts == 1, "an invalid grade is not an infra retry"
    s = summarize([t])
    assert s.n_grader_failed == 1 and s.n_excluded == 0 and s.n_scored == 1
    assert s.mean_reward == 0.0


async def test_grader_failed_survives_the_store_round_trip() -> None:
    t = await run(ScriptedGraderEnv([GraderFailed("x"), GraderFailed("y")]))
    back = Trajectory.from_json(t.to_json())
    assert back.grader_failed == t.grader_failed and back.reward == 0.0
    assert summarize([back.record()]).n_grader_failed == 1


async def test_an_infra_error_of_the_grader_is_excluded() -> None:
    t = await run(ScriptedGraderEnv([InfraError("verifier sandbox could not start")]))
    assert t.status is Status.INFRA_ERROR and t.reward is None and not t.scored
    assert t.grader_failed is None
    assert t.error is not None and (t.error.kind, t.error.phase) == ("infra", "grade")
    s = summarize([t])
    assert s.n_excluded == 1 and s.n_grader_failed == 0


async def test_an_infra_error_of_the_grader_is_retried_as_a_whole_episode() -> None:
    env = ScriptedGraderEnv([InfraError("no space before test.sh ran"), 0.5])
    t = await run(env, max_retries=1)
    assert t.status is Status.OK and t.reward == 0.5 and t.attempts == 2


@pytest.mark.parametrize(
    "bad",
    [
        1e9,
        math.nan,
        math.inf,
        -1.0,
        1.0000001,
        Reward(total=0.5, components={"bonus": 2.0}),
        Reward(total=0.5, components={"a": 1e308, "b": -1e308}),
        Reward(total=1.0, components={"x": math.nan}),
    ],
    ids=["1e9", "nan", "inf", "minus-one", "just-above-one", "component-2", "huge", "comp-nan"],
)
async def test_an_out_of_range_or_non_finite_grade_is_grader_failed(bad: Outcome) -> None:
    t = await run(ScriptedGraderEnv([bad, bad]))
    assert_grader_failed(t)
    assert t.reward == 0.0 and all(0.0 <= v <= 1.0 for v in t.components.values())
    assert math.isfinite(summarize([t]).mean_reward or 0.0)


async def test_an_invalid_value_is_regraded_and_a_valid_second_grade_counts() -> None:
    t = await run(ScriptedGraderEnv([1e9, 0.25]))
    assert t.status is Status.OK and t.reward == 0.25 and t.grader_failed is None


async def test_a_grade_past_grade_timeout_is_grader_failed_not_infra() -> None:
    t = await run(ScriptedGraderEnv([HANG, HANG]), grade_timeout_s=0.2)
    assert t.status is not Status.INFRA_ERROR, t.error
    assert_grader_failed(t)
    assert ScriptedGraderEnv.calls == ["grade", "regrade"]


async def test_a_grade_past_grade_timeout_names_the_limit() -> None:
    t = await run(ScriptedGraderEnv([HANG, HANG]), grade_timeout_s=0.2)
    assert "the grader took longer than grade_timeout_s=0.2s" in (t.grader_failed or "")


async def test_a_hung_grade_is_regraded() -> None:
    t = await run(ScriptedGraderEnv([HANG, 1.0]), grade_timeout_s=0.2)
    assert t.status is Status.OK and t.reward == 1.0 and t.grader_failed is None


async def test_step_rewards_above_one_without_a_grade_are_grader_failed() -> None:
    t = await run(ScriptedGraderEnv([None, None], steps=3, step_reward=0.5))
    assert t.n_steps == 3
    assert_grader_failed(t)


async def test_step_rewards_within_range_are_the_reward() -> None:
    t = await run(ScriptedGraderEnv([None], steps=2, step_reward=0.25))
    assert t.status is Status.OK and t.reward == 0.5 and t.grader_failed is None


async def test_a_declared_reward_range_is_normalised() -> None:
    env = ScriptedGraderEnv([5.0], metadata={"reward_range": [0, 10]})
    t = await run(env)
    assert t.status is Status.OK and t.reward == 0.5 and t.grader_failed is None


async def test_a_grade_outside_the_declared_range_is_grader_failed() -> None:
    env = ScriptedGraderEnv([11.0, 11.0], metadata={"reward_range": [0, 10]})
    assert_grader_failed(await run(env))
