"""ToolCallingHarness on calc episodes, with a scripted OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envlab.agents import AGENTS, load_agent
from envlab.agents.harness import HarnessLimits, HarnessSettings, ToolCallingHarness
from envlab.agents.model_agents import openai, parse_target
from envlab.core import Agent, AgentFactory, ConfigError, Status, Task, Trajectory
from envlab.envs.calc import CalcEnv
from envlab.models.client import OpenAICompatModel, RetryPolicy
from tests.models.fake_openai import FakeOpenAI, completion, dropped, error
from tests.support.play import play

TASK = Task(
    id="t1",
    prompt="Compute 2 + 3 using the calculator tools. Reply with just the final number.",
    answer=5.0,
    metadata={"expression": "2 + 3", "steps": [("add", 2, 3)], "n_ops": 1},
)


@pytest.fixture
def fake():
    with FakeOpenAI() as f:
        yield f


def harness(fake: FakeOpenAI, **settings: Any) -> ToolCallingHarness:
    limits = settings.pop("limits", None)
    model = OpenAICompatModel(
        "fake", fake.base_url, retry=RetryPolicy(max_retries=2, backoff_s=0.01)
    )
    return ToolCallingHarness(
        model,
        agent_name="fake",
        model_id="fake",
        endpoint=fake.base_url,
        limits=limits,
        settings=HarnessSettings(**settings),
    )


async def episode(
    agent: Agent | AgentFactory, max_retries: int = 0, model_failures: str = "agent"
) -> Trajectory:
    """One calc episode of ``TASK`` through the engine's driver (no time limits)."""
    return await play(
        CalcEnv(),
        agent,
        TASK,
        max_retries=max_retries,
        model_failures=model_failures,
        step_timeout_s=None,
        episode_timeout_s=None,
    )


def roles(traj: Trajectory) -> list[str]:
    return [m["role"] for m in traj.messages]


def tool_contents(traj: Trajectory) -> list[str]:
    return [m["content"] for m in traj.messages if m["role"] == "tool"]


async def test_native_tool_call_then_answer(fake: FakeOpenAI) -> None:
    fake.push(completion(None, tool_calls=[("add", '{"a": 2, "b": 3}')]), completion("5"))
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.reward == 1.0
    assert tool_contents(traj) == ["5"]
    # the harness sent the env's system prompt, the tools, then the tool result with its id
    first, second = fake.requests
    assert first["messages"][0]["role"] == "system"
    assert "calculator" in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} == {"add", "sub", "mul", "div"}
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "call_0"
    assert tool_msg["content"] == "5"


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
        'Let me add.\n```json\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n```',
        '{"name": "add", "arguments": {"a": 2, "b": 3}}',
        '<tool_call>[{"name": "add", "arguments": {"a": 2, "b": 3}}]</tool_call>',
    ],
    ids=["hermes", "fenced", "bare", "hermes-list"],
)
async def test_text_tool_call_formats(fake: FakeOpenAI, text: str) -> None:
    fake.push(completion(text), completion("5"))
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.reward == 1.0
    assert tool_contents(traj) == ["5"]
    assert traj.steps[0].action.info["tool_call_format"] in {"hermes", "fenced", "json"}
    assert traj.steps[0].action.info["raw_text"] == text


async def test_malformed_tool_call_json_goes_to_env_and_episode_goes_on(fake: FakeOpenAI) -> None:
    fake.push(
        completion('<tool_call>{"name": "add", "arguments": {"a": 2, "b": }</tool_call>'),
        completion(None, tool_calls=[("add", '{"a": 2, "b": 3')]),  # native, broken
        completion(None, tool_calls=[("add", '{"a": 2, "b": 3}')]),
        completion("5"),
    )
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.reward == 1.0
    results = tool_contents(traj)
    assert results[0].startswith("Error:") and results[1].startswith("Error:")
    assert "not valid JSON" in results[1] and results[2] == "5"
    assert traj.tool_errors == 2
    # the model saw the errors
    assert "Error:" in fake.requests[2]["messages"][-1]["content"]


async def test_unknown_tool_is_answered_with_the_known_ones(fake: FakeOpenAI) -> None:
    fake.push(completion(None, tool_calls=[("pow", '{"a": 2, "b": 3}')]), completion("8"))
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.reward == 0.0
    (result,) = tool_contents(traj)
    assert "unknown tool 'pow'" in result and "add" in result
    assert traj.tool_errors == 1


async def test_reply_without_tool_call_is_the_final_answer(fake: FakeOpenAI) -> None:
    fake.push(completion("The answer is 5."))
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.n_steps == 1
    assert roles(traj) == ["system", "user", "assistant"]
    assert traj.components["correct"] == 1.0 and traj.components["computed_with_tools"] == 0.0


async def test_500s_until_retries_run_out_are_the_agents_failure(fake: FakeOpenAI) -> None:
    fake.push(*[error(500, "overloaded")] * 3)  # 3 tries, then the agent's failure
    traj = await episode(harness(fake), max_retries=1)
    assert traj.status is Status.AGENT_ERROR and traj.reward == 0.0 and traj.attempts == 1
    assert traj.error is not None and traj.error.kind == "model"
    assert "HTTP 500: overloaded" in traj.error.message


async def test_500s_of_a_trusted_endpoint_are_infra_error(fake: FakeOpenAI) -> None:
    fake.push(*[error(500, "overloaded")] * 3 * 2)  # 3 tries per attempt, 2 attempts
    traj = await episode(harness(fake), max_retries=1, model_failures="exclude")
    assert traj.status is Status.INFRA_ERROR and traj.reward is None and traj.attempts == 2
    assert traj.error is not None and "HTTP 500: overloaded" in traj.error.message


async def test_429_and_dropped_connection_then_success(fake: FakeOpenAI) -> None:
    fake.push(
        error(429, "rate limited", {"Retry-After": "0"}),
        completion(None, tool_calls=[("add", '{"a": 2, "b": 3}')]),
        dropped(),
        completion("5"),
    )
    traj = await episode(harness(fake))
    assert traj.status is Status.OK and traj.reward == 1.0
    assert [s.action.info["attempts"] for s in traj.steps] == [2, 2]


async def test_refused_request_is_agent_error(fake: FakeOpenAI) -> None:
    fake.push(error(400, "context length exceeded"))
    traj = await episode(harness(fake))
    assert traj.status is Status.AGENT_ERROR and traj.error is not None
    assert "context length exceeded" in traj.error.message


async def test_turn_limit_ends_the_episode(fake: FakeOpenAI) -> None:
    fake.push(*[completion(None, tool_calls=[("add", '{"a": 1, "b": 1}')])] * 2)
    traj = await episode(harness(fake, limits=HarnessLimits(max_turns=2)))
    assert traj.status is Status.OK and len(fake.requests) == 2
    assert traj.steps[-1].action.info["harness_stop"] == "max_turns (2)"


async def test_required_tool_turns_and_parallel_flag(fake: FakeOpenAI) -> None:
    fake.push(completion(None, tool_calls=[("add", '{"a": 2, "b": 3}')]), completion("5"))
    await episode(harness(fake, required_tool_turns=1, parallel_tool_calls=False))
    first, second = fake.requests
    assert first["tool_choice"] == "required" and first["parallel_tool_calls"] is False
    assert "tool_choice" not in second


async def test_text_mode_writes_tools_into_the_prompt(fake: FakeOpenAI) -> None:
    fake.push(
        completion('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'),
        completion("5"),
    )
    traj = await episode(harness(fake, tool_mode="text"))
    assert traj.reward == 1.0
    first, second = fake.requests
    assert "tools" not in first and "<tools>" in first["messages"][0]["content"]
    assert second["messages"][-2]["content"].startswith("<tool_call>")
    assert second["messages"][-1] == {
        "role": "user",
        "content": "<tool_response>\n5\n</tool_response>",
    }


async def test_token_view_accumulates_turns(fake: FakeOpenAI) -> None:
    fake.push(
        completion(
            None,
            tool_calls=[("add", '{"a": 2, "b": 3}')],
            prompt_ids=[1, 2, 3],
            token_ids=[10, 11],
            logprobs=[-0.1, -0.2],
        ),
        completion("5", prompt_ids=[1, 2, 3, 10, 11, 4, 5], token_ids=[12], logprobs=[-0.3]),
    )
    traj = await episode(harness(fake))
    tv = traj.tokens
    assert tv is not None
    assert tv.prompt_ids == [1, 2, 3]
    assert tv.completion_ids == [10, 11, 4, 5, 12]
    assert tv.loss_mask == [1, 1, 0, 0, 1]
    assert tv.logprobs == pytest.approx([-0.1, -0.2, 0.0, 0.0, -0.3])
    assert tv.turn_starts == [3, 7]
    assert tv.turn_prompt(0) == [1, 2, 3] and tv.turn_prompt(1) == [1, 2, 3, 10, 11, 4, 5]
    # stored once: the steps carry no token ids or logprobs
    assert all("completion_ids" not in s.action.info for s in traj.steps)
    assert all("logprobs" not in s.action.info for s in traj.steps)


async def test_token_view_dropped_when_prompt_is_re_rendered(fake: FakeOpenAI) -> None:
    fake.push(
        completion(None, tool_calls=[("add", '{"a": 2, "b": 3}')], prompt_ids=[1], token_ids=[9]),
        completion("5", prompt_ids=[1, 8, 4], token_ids=[12]),
    )
    traj = await episode(harness(fake))
    assert traj.tokens is None
    assert "does not extend" in traj.steps[-1].action.info["token_view"]


async def test_openai_agent_by_name_and_spec(fake: FakeOpenAI, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setitem(AGENTS._local, "openai", openai)  # the entry point, in code
    agent = load_agent(f"openai:fake@{fake.base_url}", temperature=0.5, max_turns=3)
    assert isinstance(agent, AgentFactory)
    spec = agent.spec
    assert spec.name == "openai:fake" and spec.endpoint == fake.base_url
    assert spec.sampling["temperature"] == 0.5 and spec.limits["max_turns"] == 3
    assert spec.harness == "tool-calling/native" and spec.harness_version == "1"
    fake.push(completion("5"))
    try:
        traj = await episode(agent)
    finally:
        await agent.aclose()
    assert traj.reward == 0.8 and traj.agent == spec
    assert json.loads(traj.to_json())["agent"]["model_id"] == "fake"


def test_bad_target_says_how_to_write_it(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="openai:MODEL@URL"):
        parse_target("gpt-4o")
    assert parse_target("m@http://h:1/v1") == ("m", "http://h:1/v1")
