"""The wire: actions and observations round-trip; a client frame cannot carry a reward."""

from __future__ import annotations

import pytest

from envlab.core import Action, Observation, Reward, ToolCall, ToolResult
from envlab.serve import wire


def test_an_action_round_trips() -> None:
    a = Action(
        text="hi",
        tool_calls=[ToolCall("add", {"a": 1}, "c1"), ToolCall("mul", '{"a": 2}', "c2")],
    )
    back = wire.action_from_wire(wire.step_frame(a)["data"])
    assert back.text == "hi"
    assert [(c.name, c.arguments, c.id) for c in back.tool_calls] == [
        ("add", {"a": 1}, "c1"),
        ("mul", '{"a": 2}', "c2"),
    ]


@pytest.mark.parametrize("forged", ["reward", "done", "episode_id", "grade"])
def test_step_data_refuses_any_field_but_the_action(forged: str) -> None:
    with pytest.raises(wire.WireError) as e:
        wire.action_from_wire({"text": "4", forged: 1.0})
    assert e.value.code == wire.BAD_REQUEST and forged in str(e.value)


def test_an_openenv_typed_actions_metadata_is_accepted_and_dropped() -> None:
    a = wire.action_from_wire({"text": "x", "metadata": {"tag": "t"}})
    assert a.text == "x" and a.info == {}


def test_the_final_frame_carries_the_graded_reward_and_components() -> None:
    obs = Observation("done", [ToolResult("c1", "add", "3")])
    data = wire.observation_to_wire(
        obs,
        reward=0.25,
        done=True,
        graded=Reward(total=0.8, components={"correct": 1.0, "tools": 0.0}),
    )
    step = wire.step_from_wire(data)
    assert step.reward == 0.8 and step.done
    assert step.graded is not None and step.graded.components == {"correct": 1.0, "tools": 0.0}
    assert wire.observation_from_wire(step.observation).tool_results[0].content == "3"


def test_a_grader_failure_is_a_zero_with_its_reason() -> None:
    data = wire.observation_to_wire(
        Observation(), reward=None, done=True, graded=Reward(total=0.0), grader_failed="boom"
    )
    step = wire.step_from_wire(data)
    assert step.reward == 0.0 and step.grader_failed == "boom"


@pytest.mark.parametrize(
    "raw",
    ["not json", "[1, 2]", '{"type": "fly"}', '{"type": "step", "data": [1]}', "[" * 100000],
)
def test_malformed_client_frames_are_bad_requests(raw: str) -> None:
    with pytest.raises(wire.WireError) as e:
        wire.parse_client_frame(raw)
    assert e.value.code == wire.BAD_REQUEST


def test_reset_data_keeps_unknown_keys_aside() -> None:
    r = wire.parse_reset({"seed": 3, "task_id": "t", "difficulty": "hard"})
    assert (r.seed, r.task_id, r.ignored_keys()) == (3, "t", ["difficulty"])
    with pytest.raises(wire.WireError):
        wire.parse_reset({"seed": "three"})


def test_non_finite_step_rewards_do_not_reach_the_wire() -> None:
    data = wire.observation_to_wire(Observation(), reward=float("nan"), done=False)
    assert data["reward"] is None
