"""An agent's failures are its own: scored 0, never retried, never excluded as infrastructure.

Only envlab's model transport (``ModelUnavailable``) may declare, from inside an agent, that the
machinery failed; an agent that raises a plain ``InfraError`` itself, or returns an action the
engine cannot use (tool calls that are not a list of ``ToolCall``, an ``info`` that is not a
dict, arguments JSON cannot encode), fails in its own phase: ``agent_error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envlab.core import (
    Action,
    EpisodeContext,
    InfraError,
    Status,
    ToolCall,
    Trajectory,
)
from tests.support.envs import EchoEnv, EchoEpisode, ScriptAgent
from tests.support.play import echo_with, play


def _own_failure(t: Trajectory, phase: str = "act") -> None:
    assert t.status is Status.AGENT_ERROR, t.error
    assert t.scored and t.reward == 0.0
    assert t.error is not None and (t.error.kind, t.error.phase) == ("agent", phase)
    assert t.attempts == 1, "an agent's failure is not retried"


async def test_an_agent_raising_infra_error_in_act_is_its_own_failure() -> None:
    agent = ScriptAgent([], raise_on_act=InfraError("the model server is down"))
    t = await play(EchoEnv(), agent, max_retries=2)
    _own_failure(t)
    headline = t.error.message.splitlines()[0]  # type: ignore[union-attr]
    assert headline.startswith("InfraError: the model server is down (raised by the agent in act()")
    assert "only envlab's model transport may declare an infrastructure failure" in headline


async def test_an_agent_raising_a_subclass_of_infra_error_in_start_is_its_own_failure() -> None:
    class Outage(InfraError):
        pass

    class Starts(ScriptAgent):
        async def start(self, ctx: EpisodeContext) -> None:
            raise Outage("sandbox of my own could not start")

    t = await play(EchoEnv(), Starts([]), max_retries=2)
    _own_failure(t, phase="start")
    assert "raised by the agent in start()" in t.error.message  # type: ignore[union-attr]


async def test_infra_error_of_the_environment_stays_infra() -> None:
    """The same exception raised by the environment (reset, step) is the machinery's."""

    class BrokenStep(EchoEpisode):
        async def step(self, action: Action) -> Any:
            raise InfraError("the sandbox died")

    t = await play(echo_with(BrokenStep), ScriptAgent([]), max_retries=1)
    assert t.status is Status.INFRA_ERROR and t.attempts == 2 and not t.scored
    assert t.error is not None and (t.error.kind, t.error.phase) == ("infra", "step")


class _Shifty(Action):
    """An ``Action`` subclass whose text is a str when first read and bytes after: the engine
    reads it once, into the plain copy it checks and gives the environment."""

    __slots__ = ("_reads",)

    def __init__(self) -> None:
        super().__init__()
        self._reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "text":
            reads = object.__getattribute__(self, "_reads")
            object.__setattr__(self, "_reads", reads + 1)
            return "ok" if reads == 0 else b"ok"
        return super().__getattribute__(name)


MALFORMED = [
    pytest.param(Action(text="ok", tool_calls="repeat"), id="tool_calls_str"),
    pytest.param(Action(text="ok", tool_calls=("a",)), id="tool_calls_tuple"),
    pytest.param(Action(text="ok", tool_calls=["repeat"]), id="tool_calls_of_str"),
    pytest.param(Action(text="ok", tool_calls=[{"name": "repeat"}]), id="tool_calls_of_dict"),
    pytest.param(Action(tool_calls=[ToolCall(7, {})]), id="tool_name_int"),
    pytest.param(Action(tool_calls=[ToolCall("repeat", 3)]), id="arguments_int"),
    pytest.param(Action(tool_calls=[ToolCall("repeat", {"text": "o"}, id=None)]), id="id_none"),
    pytest.param(Action(tool_calls=[ToolCall("repeat", {"text": object()})]), id="args_not_json"),
    pytest.param(Action(text="ok", info=None), id="info_none"),
    pytest.param(Action(text="ok", info=[("a", 1)]), id="info_list"),
    pytest.param(Action(text="ok", info={"message_index": "0"}), id="message_index_str"),
    pytest.param(Action(text="ok", info={"message_index": -1}), id="message_index_negative"),
]


@pytest.mark.parametrize("action", MALFORMED)
async def test_a_malformed_action_is_the_agents_failure(action: Action) -> None:
    """Checked while the agent's phase is still ``act``: never an env_error of the step nor
    an infra_error of the record."""
    t = await play(EchoEnv(), ScriptAgent([action]), max_retries=2)
    _own_failure(t)
    assert t.error.message.startswith("TypeError: ")  # type: ignore[union-attr]
    assert t.n_steps == 0, "the environment never saw it"


async def test_well_formed_actions_still_play() -> None:
    """What the check lets through: str or dict arguments, a message index, a subclass (as
    the plain copy it checked)."""

    actions = [
        Action(tool_calls=[ToolCall("repeat", '{"text": "a"}', id="c1")], info={"k": 1}),
        Action(tool_calls=[ToolCall("repeat", {"text": "b"})], info={"message_index": 2}),
        _Shifty(),
    ]
    t = await play(EchoEnv(), ScriptAgent(actions))
    assert t.status is Status.OK and t.reward == 1.0 and t.n_steps == 3, t.error
    args = [s.action.tool_calls[0].arguments for s in t.steps[:2]]
    assert args == ['{"text": "a"}', {"text": "b"}]
    last = t.steps[2].action
    assert type(last) is Action and last.text == "ok", "the plain copy checked is what played"


async def test_the_recorded_message_is_what_the_agent_gave() -> None:
    """The assistant message is rendered in the agent's phase, before the step runs."""
    call = ToolCall("repeat", {"text": "x"}, id="c1")
    t = await play(EchoEnv(), ScriptAgent([Action(tool_calls=[call])]))
    assert t.status is Status.OK, t.error
    rendered = {
        "id": "c1",
        "type": "function",
        "function": {"name": "repeat", "arguments": '{"text": "x"}'},
    }
    assert t.messages[1] == {"role": "assistant", "content": "", "tool_calls": [rendered]}


@pytest.mark.parametrize(
    "action",
    [
        Action(text="\ud800"),
        Action(text="caf\u00e9 \udfff"),
        Action(tool_calls=[ToolCall("repeat", {"text": "a\ud800"}, id="c1")]),
        Action(tool_calls=[ToolCall("repeat", {"te\udc80xt": "a"}, id="c1")]),
        Action(tool_calls=[ToolCall("repeat", '{"text": "\ud800"}', id="c1")]),
        Action(tool_calls=[ToolCall("rep\ud800eat", {"text": "a"}, id="c1")]),
        Action(tool_calls=[ToolCall("repeat", {"text": ["x", {"y": "\ud800"}]}, id="c\ud800")]),
    ],
    ids=["text", "text-late", "arg-value", "arg-key", "arg-text", "name", "nested-and-id"],
)
async def test_text_no_encoder_can_write_is_the_agents_failure(action: Action) -> None:
    """A lone surrogate in an action crashed the whole run when its record was written (the
    agent escaping its grade by ending the run); it is the agent's malformed action."""
    t = await play(EchoEnv(), ScriptAgent([action]), max_retries=2)
    _own_failure(t)
    assert t.error is not None and "not valid Unicode" in t.error.message
    assert t.n_steps == 0, "the environment never saw it"
    assert t.to_json()


async def test_an_environments_invalid_text_is_written_not_the_runs_end(tmp_path: Path) -> None:
    """An environment whose observation holds a lone surrogate: the episode is recorded with
    U+FFFD in its place, and the run goes on."""
    from envlab.core import AgentClass, Observation, StepResult
    from envlab.rollout import rollout
    from tests.support.envs import EchoEpisode
    from tests.support.play import echo_with

    class Garbled(EchoEpisode):
        async def step(self, action: Action) -> StepResult:
            result = await super().step(action)
            return StepResult(Observation(text="bad \ud800 text"), result.reward, result.done,
                              result.truncated, result.info)  # fmt: skip

    env = echo_with(Garbled)
    run = await rollout(env, AgentClass(ScriptAgent, [Action(text="ok")]), env.tasks(n=2),
                        out_dir=tmp_path)  # fmt: skip
    assert len(run.records) == 2
    from envlab.runs import TrajectoryStore

    trajs = TrajectoryStore(tmp_path / "trajectories.jsonl").load()
    assert len(trajs) == 2
