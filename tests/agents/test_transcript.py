"""One transcript, on-policy: the trajectory's messages are exactly what the model received.

The first tests script a loopback OpenAI-compatible server (real HTTP) and compare the recorded
transcript with the requests the server got. The last ones run the real embedded model
(SmolLM2-135M GGUF, llama.cpp) through multi-turn ``calc`` episodes and re-render, for every
model turn, the recorded messages with the model's own chat template and tokenizer: the ids
must be the prompt ids the model got for that turn (token-in/token-out parity).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from envlab.agents.harness import HarnessLimits, HarnessSettings, ToolCallingHarness
from envlab.core import Action, Limits, Observation, Status, StepResult, Task, Trajectory
from envlab.envs.calc import CalcEnv, CalcEpisode
from envlab.models.client import OpenAICompatModel, RetryPolicy
from envlab.rollout import EpisodeConfig, rollout
from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore
from tests.models.fake_openai import FakeOpenAI, completion
from tests.support.play import play

TASK = Task(
    id="t1",
    prompt="Compute (2 + 3) * 4 using the calculator tools. Reply with just the final number.",
    answer=20.0,
    metadata={"expression": "(2 + 3) * 4", "steps": [("add", 2, 3), ("mul", 5, 4)], "n_ops": 2},
)
ODD_ARGS = '{ "b":3,"a" :2 }'
"""Arguments written with odd spacing and key order: they must reach the env as written."""


@pytest.fixture
def fake():
    with FakeOpenAI() as f:
        yield f


def harness(fake: FakeOpenAI, **settings: Any) -> ToolCallingHarness:
    limits = settings.pop("limits", None)
    return ToolCallingHarness(
        OpenAICompatModel("fake", fake.base_url, retry=RetryPolicy(max_retries=0)),
        agent_name="fake",
        model_id="fake",
        endpoint=fake.base_url,
        limits=limits,
        settings=HarnessSettings(**settings),
    )


async def episode(agent: ToolCallingHarness) -> Trajectory:
    return await play(CalcEnv(), agent, TASK, step_timeout_s=None, episode_timeout_s=None)


def assert_transcript_is_what_was_sent(traj: Trajectory, requests: list[dict[str, Any]]) -> None:
    """Request k's messages are the transcript up to model turn k's reply, which follows."""
    turns = [s.message_index for s in traj.steps if s.message_index is not None]
    assert len(turns) == len(requests)
    for k, (index, request) in enumerate(zip(turns, requests, strict=True)):
        assert traj.messages[:index] == request["messages"], f"turn {k}"
        assert traj.messages[index]["role"] == "assistant", f"turn {k}"
    assert turns[-1] == len(traj.messages) - 1  # the last reply ends the transcript


async def test_text_mode_transcript_is_exactly_what_the_model_received(fake: FakeOpenAI) -> None:
    first = f'I will add.\n<tool_call>\n{{"name": "add", "arguments": {ODD_ARGS}}}\n</tool_call>'
    second = '<tool_call>\n{"name": "mul", "arguments": {"a": 5, "b": 4}}\n</tool_call>'
    fake.push(completion(first), completion(second), completion("20"))
    traj = await episode(harness(fake, tool_mode="text"))
    assert traj.reward == 1.0
    assert_transcript_is_what_was_sent(traj, fake.requests)
    # the system message is the whole one the model got: env prompt, instructions, tools block
    system = traj.messages[0]
    assert system == fake.requests[0]["messages"][0] and system["role"] == "system"
    assert system["content"].startswith(CalcEnv().new_episode().system_prompt())
    assert "<tools>" in system["content"] and "Use the tools" in system["content"]
    # replies as the model wrote them, results as the <tool_response> turns it was sent
    assert [m["role"] for m in traj.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert traj.messages[1] == {"role": "user", "content": TASK.prompt}
    assert [traj.messages[i]["content"] for i in (2, 4, 6)] == [first, second, "20"]
    assert traj.messages[3]["content"] == "<tool_response>\n5\n</tool_response>"
    assert traj.messages[5]["content"] == "<tool_response>\n20\n</tool_response>"
    assert not any("tool_calls" in m for m in traj.messages)
    # the structured view beside it: the calls with their arguments as written, the results
    call = traj.steps[0].action.tool_calls[0]
    assert call.name == "add" and call.arguments == ODD_ARGS
    assert traj.steps[0].observation.tool_results[0].content == "5"
    assert [s.message_index for s in traj.steps] == [2, 4, 6]


async def test_native_transcript_holds_the_servers_tool_calls_untouched(fake: FakeOpenAI) -> None:
    fake.push(
        completion(None, tool_calls=[("add", ODD_ARGS)]),
        completion("", tool_calls=[("mul", '{"a":5,"b":4}')]),
        completion("20"),
    )
    traj = await episode(harness(fake))
    assert traj.reward == 1.0
    assert_transcript_is_what_was_sent(traj, fake.requests)
    replies = [traj.messages[s.message_index] for s in traj.steps]  # type: ignore[index]
    assert [r["tool_calls"] for r in replies[:2]] == [
        [{"id": "call_0", "type": "function", "function": {"name": "add", "arguments": ODD_ARGS}}],
        [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "mul", "arguments": '{"a":5,"b":4}'},
            }
        ],
    ]
    assert traj.messages[3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "name": "add",
        "content": "5",
    }
    assert traj.steps[0].action.tool_calls[0].arguments == ODD_ARGS


async def test_arguments_are_decoded_once_by_the_environment(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    real = json.loads

    def counting(s: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(s, str) and s.strip() == ODD_ARGS.strip():
            decoded.append(sys._getframe(1).f_code.co_qualname)  # who decoded them
        return real(s, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    for mode, reply in (
        ("native", completion(None, tool_calls=[("add", ODD_ARGS)])),
        ("text", completion(f'<tool_call>{{"name": "add", "arguments": {ODD_ARGS}}}</tool_call>')),
    ):
        decoded.clear()
        fake.push(reply, completion("5"))
        traj = await episode(harness(fake, tool_mode=mode))
        assert traj.steps[0].observation.tool_results[0].content == "5", mode
        assert decoded == ["ToolSpec.decode_arguments"], mode


async def test_a_harness_stop_has_no_model_turn(fake: FakeOpenAI) -> None:
    fake.push(*[completion(None, tool_calls=[("add", '{"a": 1, "b": 1}')])] * 2)
    traj = await episode(harness(fake, limits=HarnessLimits(max_turns=2)))
    assert len(fake.requests) == 2
    stop = traj.steps[-1]
    assert stop.action.info["harness_stop"] == "max_turns (2)" and stop.message_index is None
    # the last tool result was never sent to the model: the transcript ends with its reply
    assert_transcript_is_what_was_sent(traj, fake.requests)
    assert traj.messages[-1]["role"] == "assistant"


# --- the real embedded model: token-in/token-out parity ----------------------------------------

UNTIMED = EpisodeConfig(overrides=Limits.overrides(step_timeout_s=1e9, episode_timeout_s=1e9))
"""No limit a slow, busy machine could reach (pytest's timeout guards a hang)."""


@pytest.fixture(scope="module")
def engine() -> Any:
    pytest.importorskip("llama_cpp", reason="the embedded model needs the extra envlab[local]")
    from envlab.models.llamacpp import shared_engine
    from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path

    # the key smollm2's in-process app uses: the very engine the episodes ran on
    return shared_engine(smollm2_path(), model_id=SMOLLM2_MODEL_ID)


def render_turn(
    engine: Any, messages: list[dict[str, Any]], mode: str, tool_choice: str | None
) -> list[int]:
    """Turn ``messages`` into prompt ids with the model's own chat template and tokenizer.

    Text mode: the GGUF's Jinja template itself (the messages are plain role/content turns);
    native: the server's rendering (``ChatTemplate``: that template plus Hermes tools)."""
    if mode == "text":
        import jinja2

        assert all(set(m) == {"role", "content"} for m in messages), messages
        template = jinja2.Environment().from_string(engine.template.source)
        text = template.render(messages=messages, add_generation_prompt=True)
    else:
        from envlab.models.wire import ChatMessage

        tools = [t.to_openai() for t in CalcEnv().new_episode().tools]
        wire = [ChatMessage.model_validate(m) for m in messages]
        text = engine.template.render(wire, tools, tool_choice).text
    return engine.tokenize(text)


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def assert_parity(engine: Any, traj: Trajectory, mode: str, required_tool_turns: int) -> int:
    """For every model turn k, the recorded messages before its reply re-render to exactly
    ``tokens.turn_prompt(k)``; returns the number of model turns."""
    dropped = [s.action.info["token_view"] for s in traj.steps if "token_view" in s.action.info]
    assert traj.tokens is not None, f"{traj.episode_id}: no token view ({dropped})"
    turns = [s.message_index for s in traj.steps if s.message_index is not None]
    assert len(traj.tokens.turn_starts) == len(turns)
    for k, index in enumerate(turns):
        choice = "required" if mode == "native" and k < required_tool_turns else None
        got = render_turn(engine, traj.messages[:index], mode, choice)
        want = traj.tokens.turn_prompt(k)
        if got != want:
            at = first_difference(got, want)
            pytest.fail(
                f"{mode} {traj.episode_id} turn {k}: the recorded messages render to "
                f"{len(got)} ids, the model got {len(want)}; first difference at position {at}: "
                f"rendered {got[at : at + 8]}, recorded {want[at : at + 8]}"
            )
    return len(turns)


def assert_teeth(engine: Any, traj: Trajectory, mode: str, choice: str | None) -> None:
    """The system message the engine alone knows (the env's prompt, without what the harness
    added) does not render to what the model got: the check sees a transcript that is off."""
    assert traj.tokens is not None and traj.steps[0].message_index is not None
    system = CalcEnv().new_episode().system_prompt()
    engines_view = [{"role": "system", "content": system}, *traj.messages[1:]]
    got = render_turn(engine, engines_view[: traj.steps[0].message_index], mode, choice)
    assert got != traj.tokens.turn_prompt(0)


class NudgedEpisode(CalcEpisode):
    """calc whose first final answer is answered with a nudge instead of ending the episode:
    a second model turn whatever the model writes first (a text turn after a user turn)."""

    nudged = False

    async def step(self, action: Action) -> StepResult:
        if not action.tool_calls and not self.nudged:
            self.nudged = True
            self.n_steps += 1
            return StepResult(Observation(text="Use the tools for each step, then answer again."))
        return await super().step(action)


class NudgedCalc(CalcEnv):
    environment = NudgedEpisode


async def model_run(
    tmp_path: Any, mode: str, n: int, spec: CalcEnv | None = None, **agent: Any
) -> list[Trajectory]:
    from envlab.agents.model_agents import smollm2

    factory = smollm2(temperature=0.0, max_tokens=48, max_time_s=1e9, tool_mode=mode, **agent)
    spec = spec or CalcEnv()
    try:
        await rollout(
            spec, factory, spec.tasks(n=n), out_dir=tmp_path / mode, concurrency=1, config=UNTIMED
        )
    finally:
        await factory.aclose()
    trajs = TrajectoryStore(tmp_path / mode / TRAJECTORIES_FILE).load()
    assert len(trajs) == n and all(t.status is Status.OK for t in trajs), [t.error for t in trajs]
    return trajs


async def test_native_mode_messages_re_render_to_the_prompt_ids(engine: Any, tmp_path: Any) -> None:
    # one forced tool call: a second model turn follows whatever the model wrote
    (traj,) = await model_run(tmp_path, "native", 1, max_turns=3, required_tool_turns=1)
    assert assert_parity(engine, traj, "native", required_tool_turns=1) >= 2
    assert any(m["role"] == "tool" for m in traj.messages)
    assert_teeth(engine, traj, "native", "required")


async def test_text_mode_messages_re_render_to_the_prompt_ids(engine: Any, tmp_path: Any) -> None:
    # whatever the model writes, each episode has a second model turn (a tool turn or a nudge)
    trajs = await model_run(tmp_path, "text", 2, NudgedCalc(), max_turns=3, required_tool_turns=0)
    turns = [assert_parity(engine, t, "text", required_tool_turns=0) for t in trajs]
    assert min(turns) >= 2, turns
    for t in trajs:
        assert t.messages[0]["content"].startswith(CalcEnv().new_episode().system_prompt())
        assert "<tools>" in t.messages[0]["content"]
        assert_teeth(engine, t, "text", None)
