"""Malformed tool calls are answered with an error the agent can read; the episode goes on."""

from __future__ import annotations

import pytest

from envlab.core import (
    Action,
    Component,
    EpisodeOrderError,
    GradingContext,
    Rubric,
    ToolCall,
)
from envlab.rollout.config import wrap_for_limits
from tests.support.envs import EchoEnv, EchoEpisode
from tests.support.play import echo_with


@pytest.fixture
async def env() -> EchoEpisode:
    spec = EchoEnv()
    e = spec.new_episode()
    assert isinstance(e, EchoEpisode)
    await e.reset(spec.tasks()[0])
    return e


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (ToolCall("nope", {}), "unknown tool 'nope'. Available tools: explode, repeat, wait"),
        (ToolCall("repeat", '{"text": "a", '), "are not valid JSON"),
        (ToolCall("repeat", "[1, 2]"), "must be a JSON object"),
        (ToolCall("repeat", {"text": "a", "times": "many"}), "'times': Input should be a valid"),
        (ToolCall("repeat", {}), "'text': Field required"),
        (ToolCall("repeat", {"text": "a", "colour": 1}), "'colour': Extra inputs"),
    ],
)
async def test_malformed_call_is_an_error_observation(
    env: EchoEpisode, call: ToolCall, message: str
) -> None:
    res = await env.step(Action(tool_calls=[call]))
    assert not res.done
    assert res.info["tool_errors"] == 1
    (result,) = res.observation.tool_results
    assert result.is_error and message in result.content
    # the episode goes on: a good call right after works
    res = await env.step(Action(tool_calls=[ToolCall("repeat", '{"text": "ab", "times": 2}')]))
    assert res.observation.tool_results[0].content == "abab"
    assert res.info["tool_errors"] == 0


async def test_arguments_as_json_string_and_lax_numbers(env: EchoEpisode) -> None:
    res = await env.step(Action(tool_calls=[ToolCall("repeat", '{"text": "x", "times": "3"}')]))
    assert res.observation.tool_results[0].content == "xxx"


async def test_several_calls_in_one_step_keep_ids(env: EchoEpisode) -> None:
    calls = [ToolCall("repeat", {"text": "a"}, id="A"), ToolCall("nope", {}, id="B")]
    res = await env.step(Action(tool_calls=calls))
    assert [r.tool_call_id for r in res.observation.tool_results] == ["A", "B"]
    assert res.info["tool_errors"] == 1


async def test_final_answer_ends_and_grades(env: EchoEpisode) -> None:
    res = await env.step(Action(text="ok"))
    assert res.done and (await env.grade()).total == 1.0
    with pytest.raises(EpisodeOrderError, match="after the episode ended"):
        await env.step(Action(text="again"))


async def test_an_episode_serves_one_reset_and_no_step_before_it() -> None:
    spec = EchoEnv()
    task = spec.tasks()[0]
    fresh = spec.new_episode()
    with pytest.raises(EpisodeOrderError, match=r"step\(\) called before reset\(\)"):
        await fresh.step(Action(text="ok"))
    await fresh.reset(task)
    with pytest.raises(EpisodeOrderError, match=r"reset\(\) called twice.*spec\.new_episode"):
        await fresh.reset(task)


async def test_truncates_at_max_steps() -> None:
    """The engine's limits (the spec's ``max_steps``, as a ``StepLimit``) end a tool episode."""
    spec = EchoEnv()
    task = spec.tasks()[0]
    limits = spec.limits(task)
    assert limits.max_steps == 5
    env = wrap_for_limits(spec.new_episode(), limits)
    await env.reset(task)
    for _ in range(limits.max_steps - 1):
        res = await env.step(Action(tool_calls=[ToolCall("repeat", {"text": "a"})]))
        assert not res.truncated
    res = await env.step(Action(tool_calls=[ToolCall("repeat", {"text": "a"})]))
    assert res.truncated and not res.done
    assert res.info["truncated_by"] == "StepLimit(max_steps=5)"


async def test_graders_see_a_grading_context_not_the_environment() -> None:
    seen: list[object] = []

    def judge(ctx: GradingContext) -> float:
        seen.append(ctx)
        return float(ctx.final_answer == "ok")

    class Judged(EchoEpisode):
        rubric = Rubric([Component("answered_ok", judge)])

    spec = echo_with(Judged)
    task = spec.tasks()[0]
    env = spec.new_episode()
    await env.reset(task)
    await env.step(Action(tool_calls=[ToolCall("repeat", '{"text": "o", "times": 2}', id="c")]))
    await env.step(Action(tool_calls=[ToolCall("nope", {})]))
    await env.step(Action(text="ok"))
    assert (await env.grade()).total == 1.0
    (ctx,) = seen
    assert isinstance(ctx, GradingContext)
    assert ctx.task == task and ctx.final_answer == "ok"
    assert ctx.state == env.state() and ctx.state["n_steps"] == 3 and ctx.state["done"]
    assert ctx.tool_log == (
        {"name": "repeat", "arguments": {"text": "o", "times": 2}, "result": "oo"},
        {"name": "nope", "error": "unknown tool 'nope'. Available tools: explode, repeat, wait"},
    )


async def test_the_tool_log_holds_what_was_sent_even_when_the_tool_edits_it() -> None:
    """A tool that fills in its arguments in place (τ-bench's flight updates do) must not
    rewrite the record of the call a grader reads."""
    from envlab.core.tools import tool

    class Editing(EchoEpisode):
        @tool
        def book(self, legs: list[dict[str, str]]) -> str:
            """Book legs.

            Args:
                legs: The legs.
            """
            for leg in legs:
                leg["price"] = "100"
            return "booked"

    env = echo_with(Editing).new_episode()
    await env.reset(EchoEnv().tasks()[0])
    await env.step(Action(tool_calls=[ToolCall("book", '{"legs": [{"flight": "HAT1"}]}')]))
    assert env.tool_log[-1]["arguments"] == {"legs": [{"flight": "HAT1"}]}
