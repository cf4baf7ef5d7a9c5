"""Malformed tool calls are answered with an error the agent can read; the episode goes on."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from envlab.core import (
    Action,
    Component,
    EpisodeOrderError,
    GradingContext,
    Rubric,
    ToolCall,
)
from envlab.core.tools import ToolSpec
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
        # a JSON escape that decodes to a lone surrogate: SQLite, orjson and the record refuse it
        (ToolCall("repeat", '{"text": "a\\ud800"}'), "not valid Unicode"),
        (ToolCall("repeat", '{"te\\udc00xt": "a"}'), "not valid Unicode"),
        (ToolCall("repeat", {"text": "\ud800"}), "not valid Unicode"),
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


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


class _LaxSpec(ToolSpec):
    """A tool spec whose parser lets any nesting through (as one built from logs with no
    schema could): the copy ``run_tool`` keeps is then the first thing to meet the depth."""

    __slots__ = ()

    def parse_arguments(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        return {"text": _nested(20_000)}


def _lax_episode() -> EchoEpisode:
    class Lax(EchoEpisode):
        pass

    spec = Lax._tool_specs["repeat"]
    kept = {f.name: getattr(spec, f.name) for f in fields(spec) if f.init}
    Lax._tool_specs = {**Lax._tool_specs, "repeat": _LaxSpec(**kept)}
    env = echo_with(Lax).new_episode()
    assert isinstance(env, EchoEpisode)
    return env


async def test_arguments_too_deep_to_copy_are_the_agents_malformed_call() -> None:
    """Arguments a lax schema let through but too deep to copy are refused as the agent's
    malformed call (an error it reads, counted in tool_errors), never a crash of the step."""
    env = _lax_episode()
    await env.reset(EchoEnv().tasks()[0])
    out = await env.step(Action(tool_calls=[ToolCall("repeat", '{"text": "x"}', id="d")]))
    (res,) = out.observation.tool_results
    assert res.is_error and "nested too deeply" in res.content
    assert out.info["tool_errors"] == 1 and not env.done
    assert env.tool_log[-1] == {"name": "repeat", "error": res.content.removeprefix("Error: ")}


async def test_refusing_a_call_too_deep_to_copy_logs_it_without_arguments() -> None:
    env = _lax_episode()
    await env.reset(EchoEnv().tasks()[0])
    res = env.refuse_call(ToolCall("repeat", "{}"), "d", "rate limited")
    assert res.is_error and res.content == "Error: rate limited"
    assert env.tool_log[-1] == {"name": "repeat", "error": "rate limited"}


async def test_an_episode_may_offer_only_some_of_its_tools() -> None:
    class Narrow(EchoEpisode):
        async def on_reset(self, task: Any, seed: Any) -> None:
            self.offered_tools = frozenset({"repeat"})

    spec = echo_with(Narrow)
    env = spec.new_episode()
    await env.reset(spec.tasks()[0])
    assert [t.name for t in env.tools] == ["repeat"]
    res = await env.step(Action(tool_calls=[ToolCall("wait", {"seconds": 0})]))
    (result,) = res.observation.tool_results
    assert result.is_error and "unknown tool 'wait'. Available tools: repeat" in result.content
    res = await env.step(Action(tool_calls=[ToolCall("repeat", {"text": "a"})]))
    assert res.observation.tool_results[0].content == "a"
