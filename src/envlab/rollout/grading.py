"""Grading an episode by the one rule for a valid grade (docs/concepts.md, "A valid grade")."""

from __future__ import annotations

import asyncio
from typing import Any

from envlab.core import Environment, GraderFailed, InfraError, Reward, Task, validate_reward
from envlab.core.rubric import reward_range_of
from envlab.rollout.deadlines import deadlines


async def grade_episode(
    env: Environment,
    task: Task,
    step_rewards: float,
    grade_timeout: float | None,
    me: asyncio.Task[Any],
) -> tuple[Reward, str | None]:
    """The valid reward of the agent's final state, and why grading failed if it did.

    A grade that is not valid (``GraderFailed``, any other exception of the grader, a value out
    of range, past ``grade_timeout``) is run once more, fresh (``regrade``); if that fails too
    the episode scores 0 with the reason. Only an ``InfraError`` (the grading machinery itself)
    escapes, to be retried and excluded."""
    reasons: list[str] = []
    details: dict[str, Any] = {}
    for attempt in range(2):
        try:
            raw = await _graded_once(env, attempt, grade_timeout, me)
            if raw is None:
                raw = Reward(total=step_rewards, details={"from": "step rewards"})
            return validate_reward(raw, reward_range_of(task.metadata)), None
        except InfraError:
            raise
        except (GraderFailed, Exception) as e:  # an invalid grade: the agent may have caused it
            reasons.append(_grader_reason(e))
            details = getattr(e, "details", None) or details
    reason = f"{reasons[0]}; graded again: {reasons[1]}" if reasons[1] != reasons[0] else reasons[0]
    return Reward(total=0.0, details={**details, "grader_failed": reason}), reason


async def _graded_once(
    env: Environment, attempt: int, grade_timeout: float | None, me: asyncio.Task[Any]
) -> Reward | None:
    dl = deadlines()
    try:
        dl.set(me, grade_timeout, "grade")
        return await (env.grade() if attempt == 0 else env.regrade())
    except (asyncio.CancelledError, Exception):
        # our deadline's cancellation, or the grader's own error made of it: a grade too slow;
        # anything else (a real cancellation, the grader's error) goes on as it is
        if dl.expired(me) is None:
            raise
        me.uncancel()
        raise GraderFailed(
            f"the grader took longer than grade_timeout_s={grade_timeout}s"
        ) from None
    finally:
        if dl.clear(me):
            await dl.absorb(me)


def _grader_reason(e: BaseException) -> str:
    if isinstance(e, GraderFailed):
        return str(e)
    return f"the grader raised {type(e).__name__}: {e}"
