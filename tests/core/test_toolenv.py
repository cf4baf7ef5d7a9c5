"""Malformed tool calls are answered with an error the agent can read; the episode goes on."""

from __future__ import annotations

import pytest

from envlab.core import Action, ToolCall
from tests.support.envs import EchoEnv


@pytest.fixture
async def env() -> EchoEnv:
    e = EchoEnv()
    await e.reset(e.tasks()[0])
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
    env: EchoEnv, call: ToolCall, message: str
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


async def test_arguments_as_json_string_and_lax_numbers(env: EchoEnv) -> None:
    res = await env.step(Action(tool_calls=[ToolCall("repeat", '{"text": "x", "times": "3"}')]))
    assert res.observation.tool_results[0].content == "xxx"


async def test_several_calls_in_one_step_keep_ids(env: EchoEnv) -> None:
    calls = [ToolCall("repeat", {"text": "a"}, id="A"), ToolCall("nope", {}, id="B")]
    res = await env.step(Action(tool_calls=calls))
    assert [r.tool_call_id for r in res.observation.tool_results] == ["A", "B"]
    assert res.info["tool_errors"] == 1


async def test_final_answer_ends_and_grades(env: EchoEnv) -> None:
    res = await env.step(Action(text="ok"))
    assert res.done and (await env.grade()).total == 1.0
    with pytest.raises(RuntimeError, match="after the episode ended"):
        await env.step(Action(text="again"))


async def test_truncates_at_max_steps(env: EchoEnv) -> None:
    for _ in range(env.max_steps - 1):
        res = await env.step(Action(tool_calls=[ToolCall("repeat", {"text": "a"})]))
        assert not res.truncated
    res = await env.step(Action(tool_calls=[ToolCall("repeat", {"text": "a"})]))
    assert res.truncated and not res.done
