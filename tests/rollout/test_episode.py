"""Timeouts, error attribution and infra retries of one episode."""

from __future__ import annotations

import asyncio
import socket

import pytest

from envlab.agents.model_agents import openai
from envlab.core import Action, InfraError, Status, ToolCall
from tests.models.fake_openai import FakeOpenAI, completion, error
from tests.support.envs import EchoEnv, EchoEpisode, ScriptAgent
from tests.support.play import play


def echo_with(episode: type[EchoEpisode]) -> EchoEnv:
    """``EchoEnv`` whose episodes are ``episode``."""
    return type(f"EchoWith{episode.__name__}", (EchoEnv,), {"environment": episode})()


async def run(env: EchoEnv, agent, max_retries: int = 2, **limits):  # type: ignore[no-untyped-def]
    return await play(env, agent, max_retries=max_retries, **limits)


async def test_ok_episode_records_messages_and_reward() -> None:
    agent = ScriptAgent([Action(tool_calls=[ToolCall("repeat", {"text": "o"}, id="t1")])])
    t = await run(EchoEnv(), agent)
    assert t.status is Status.OK and t.reward == 1.0 and t.n_steps == 2
    roles = [m["role"] for m in t.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert t.messages[2]["content"] == "o"
    assert t.components == {"answered_ok": 1.0}


async def test_malformed_tool_calls_are_counted_not_fatal() -> None:
    agent = ScriptAgent(
        [
            Action(tool_calls=[ToolCall("nope", {})]),
            Action(tool_calls=[ToolCall("repeat", "{not json")]),
        ]
    )
    t = await run(EchoEnv(), agent)
    assert t.status is Status.OK and t.reward == 1.0
    assert t.tool_errors == 2
    assert "Error: unknown tool 'nope'" in t.messages[2]["content"]


async def test_step_timeout_is_timeout_and_still_graded() -> None:
    agent = ScriptAgent([Action(tool_calls=[ToolCall("wait", {"seconds": 5})])])
    t = await run(EchoEnv(), agent, step_timeout_s=0.1)
    assert t.status is Status.TIMEOUT
    # which limit, its value, and what was running when it passed
    assert t.error is not None and t.error.kind == "timeout" and t.error.phase == "step"
    assert t.error.message == (
        "step 0 took longer than step_timeout_s=0.1s while the environment was stepping"
    )
    assert t.reward == 0.0  # graded what the agent left: no answer


async def test_episode_timeout_caps_the_step_limit() -> None:
    quick = Action(tool_calls=[ToolCall("repeat", {"text": "a"})])
    agent = ScriptAgent([quick, Action(tool_calls=[ToolCall("wait", {"seconds": 30})])])
    t = await run(EchoEnv(), agent, step_timeout_s=10.0, episode_timeout_s=0.2)
    assert t.status is Status.TIMEOUT and t.n_steps == 1
    assert t.error is not None and t.error.message == (
        "the episode took longer than episode_timeout_s=0.2s, at step 1 while the environment "
        "was stepping"
    )


async def test_agent_timeout_names_the_agent() -> None:
    class Slow(ScriptAgent):
        async def act(self, observation):  # type: ignore[no-untyped-def]
            await asyncio.sleep(30)
            return await super().act(observation)

    t = await run(EchoEnv(), Slow([]), step_timeout_s=0.1)
    assert t.status is Status.TIMEOUT
    assert t.error is not None and t.error.phase == "act"
    assert (
        t.error.message == "step 0 took longer than step_timeout_s=0.1s while the agent was acting"
    )


async def test_env_exception_is_env_error_and_not_scored() -> None:
    agent = ScriptAgent([Action(tool_calls=[ToolCall("explode", {})])])
    t = await run(EchoEnv(), agent)
    assert t.status is Status.ENV_ERROR
    assert t.reward is None and not t.scored
    assert t.error is not None and t.error.kind == "env" and t.error.phase == "step"
    assert "ValueError: kaboom" in t.error.message
    assert t.attempts == 1  # env errors are not retried


async def test_reset_crash_is_env_error() -> None:
    t = await run(EchoEnv(mode="reset_crash"), ScriptAgent([]))
    assert t.status is Status.ENV_ERROR and t.error is not None
    assert (t.error.kind, t.error.phase) == ("env", "reset") and "broken reset" in t.error.message


async def test_agent_exception_is_agent_error_and_scored_as_failure() -> None:
    t = await run(EchoEnv(), ScriptAgent([], raise_on_act=KeyError("bad parse")))
    assert t.status is Status.AGENT_ERROR
    assert t.error is not None and (t.error.kind, t.error.phase) == ("agent", "act")
    assert t.reward == 0.0 and t.scored


async def test_a_trusted_model_server_failing_is_infra_error_retried_then_succeeds() -> None:
    """A real endpoint on 127.0.0.1 that answers HTTP 500 twice, in a run that excludes model
    failures (a trusted endpoint): ``ModelUnavailable`` each time, the engine retries the
    episode, the third plays."""
    with FakeOpenAI() as fake:
        fake.push(error(500, "overloaded"), error(500, "overloaded"), completion("ok"))
        agents = openai(f"fake@{fake.base_url}", max_retries=0, backoff_s=0.0)
        try:
            t = await run(EchoEnv(), agents, max_retries=2, model_failures="exclude")
        finally:
            await agents.aclose()
    assert t.status is Status.OK and t.reward == 1.0, t.error
    assert t.attempts == 3


@pytest.mark.parametrize("policy", ["agent", "exclude"])
async def test_a_dead_model_endpoint_after_retries(policy: str) -> None:
    """Nothing listens at the endpoint: connection refused on every try. The agent's own
    endpoint: its failure, scored 0, not retried; a trusted one: ``infra_error``, retried."""
    with socket.socket() as s:  # a port that was free a moment ago, closed: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agents = openai(f"fake@http://127.0.0.1:{port}/v1", max_retries=0, backoff_s=0.0)
    try:
        t = await run(EchoEnv(), agents, max_retries=2, model_failures=policy)
    finally:
        await agents.aclose()
    assert t.error is not None and (t.error.kind, t.error.phase) == ("model", "act")
    assert t.error.message.startswith("ModelUnavailable: model server")
    assert "ConnectError" in t.error.message
    if policy == "agent":
        assert t.status is Status.AGENT_ERROR and t.attempts == 1
        assert t.reward == 0.0 and t.scored
    else:
        assert t.status is Status.INFRA_ERROR and t.attempts == 3
        assert t.reward is None and not t.scored


async def test_infra_error_raised_inside_env_is_infra() -> None:
    class Broken(EchoEpisode):
        async def on_reset(self, task, seed):  # type: ignore[no-untyped-def]
            raise InfraError("sandbox could not start")

    t = await run(echo_with(Broken), ScriptAgent([]), max_retries=1)
    assert t.status is Status.INFRA_ERROR and t.attempts == 2


async def test_truncated_at_max_steps() -> None:
    agent = ScriptAgent([Action(tool_calls=[ToolCall("repeat", {"text": "a"})])] * 10)
    t = await run(EchoEnv(), agent, max_steps=3)
    assert t.steps[-1].info["truncated_by"] == "StepLimit(max_steps=3)"
    assert t.status is Status.TRUNCATED and t.n_steps == 3 and t.reward == 0.0


async def test_slow_reset_is_not_the_agents_time() -> None:
    class SlowReset(EchoEpisode):
        async def on_reset(self, task, seed):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.3)

    t = await run(echo_with(SlowReset), ScriptAgent([]), episode_timeout_s=0.2)
    assert t.status is Status.OK and t.reward == 1.0
    t = await run(echo_with(SlowReset), ScriptAgent([]), reset_timeout_s=0.1, max_retries=0)
    assert t.status is Status.INFRA_ERROR and t.error is not None
    assert t.error.message == (
        "reset took longer than reset_timeout_s=0.1s while the environment was resetting"
    )


async def test_cancelling_an_episode_still_closes_env_and_agent() -> None:
    closed: list[str] = []

    class Tracked(EchoEpisode):
        async def close(self) -> None:
            closed.append("env")

    class TrackedAgent(ScriptAgent):
        async def close(self) -> None:
            closed.append("agent")

    agent = TrackedAgent([Action(tool_calls=[ToolCall("wait", {"seconds": 5})])])
    task = asyncio.create_task(run(echo_with(Tracked), agent))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(closed) == ["agent", "env"]


async def test_privileged_data_follows_the_recorded_spec() -> None:
    seen: list[object] = []

    class Sneaky(ScriptAgent):
        privileged = True  # claims privilege, but its spec does not say so

        async def start(self, ctx):  # type: ignore[no-untyped-def]
            seen.append(ctx.task)

    await run(EchoEnv(), Sneaky([]))
    assert seen == [None]


async def test_a_forged_transcript_does_not_change_the_grade() -> None:
    """The transcript is a record, never graded: an agent that claims, in ``transcript()``, to
    have answered correctly is scored on what it gave the environment, and one whose record
    breaks loses nothing else."""

    class Forger(ScriptAgent):
        def transcript(self):  # type: ignore[no-untyped-def]
            return [{"role": "user", "content": "say ok"}, {"role": "assistant", "content": "ok"}]

    t = await run(EchoEnv(), Forger([Action(text="not ok")]))
    assert t.status is Status.OK and t.reward == 0.0, "graded on the action, not the record"
    assert t.messages[-1]["content"] == "ok", "the record is what the agent said it sent"
    assert t.steps[0].action.text == "not ok", "the structured view is what the env got"

    class Broken(ScriptAgent):
        def transcript(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("no record")

    t = await run(EchoEnv(), Broken([Action(text="ok")]))
    assert t.status is Status.OK and t.reward == 1.0
    assert "no record" in t.info["agent_record_errors"][0]


async def test_acting_after_the_end_cannot_change_the_graded_state() -> None:
    """The engine stops at done; a step sent after it (an agent driving the env itself) is
    refused by the order check and never reaches the episode that is graded."""
    from envlab.core import EpisodeOrderError
    from envlab.rollout.config import wrap_for_limits

    spec = EchoEnv()
    task = spec.tasks()[0]
    env = wrap_for_limits(spec.new_episode(), spec.limits(task))
    await env.reset(task, 0)
    await env.step(Action(text="ok"))
    with pytest.raises(EpisodeOrderError, match="after the episode ended"):
        await env.step(Action(text="overwritten"))
    reward = await env.grade()
    assert reward is not None and reward.total == 1.0
    assert env.state()["final_answer"] == "ok"
