"""The vf: adapter against verifiers' own scoring, on the offline fixture taskset
(tests/adapters/vf_fixture, installed with ``pip install -e`` or put on sys.path here)."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers")
vf = pytest.importorskip("verifiers.v1")

from envlab.adapters.verifiers import VerifiersEnv, catalog, load_verifiers_env  # noqa: E402
from envlab.core import Action, ConfigError  # noqa: E402
from envlab.core.rubric import validate_reward  # noqa: E402

FIXTURE = "envlab-vf-fixture"
REPLIES = {
    "right": "2 + 3 = 5, so \\boxed{5}",
    "wrong": "\\boxed{6}",
    "malformed": "the answer is 5",
    "empty": "",
    "junk": "\\boxed{" + "x" * 500,
}


@pytest.fixture(autouse=True)
def _fixture_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "vf_fixture"))
    sys.modules.pop("envlab_vf_fixture", None)


def direct_reward(task_index: int, reply: str) -> tuple[float, dict[str, Any]]:
    """verifiers alone: its loader, its trace, its scoring; no envlab in the loop."""
    from verifiers.v1.graph import prepare_turn
    from verifiers.v1.state import state_cls

    taskset = vf.load_taskset(vf.TasksetConfig(id=FIXTURE))
    task = list(taskset)[task_index]
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        state=state_cls(type(task))(),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
    )
    prompt = [
        vf.SystemMessage(content=task.data.system_prompt),
        vf.UserMessage(content=task.data.prompt),
    ]
    message = vf.AssistantMessage(content=reply)
    response = vf.Response(
        id=uuid.uuid4().hex,
        created=int(time.time()),
        model="m",
        message=message,
        finish_reason="stop",
    )
    prepare_turn(trace, prompt).commit(response)
    asyncio.run(task.score(trace))
    return trace.reward, {k: r.score for k, r in trace.rewards.items()}


def envlab_reward(spec: VerifiersEnv, task_index: int, reply: str) -> Any:
    async def run() -> Any:
        task = spec.tasks()[task_index]
        episode = spec.new_episode()
        await episode.reset(task)
        result = await episode.step(Action(text=reply))
        assert result.done
        return task, await episode.grade()

    return asyncio.run(run())


@pytest.mark.parametrize("kind", sorted(REPLIES))
@pytest.mark.parametrize("task_index", [0, 3])
def test_same_reward_as_verifiers_scoring(kind: str, task_index: int) -> None:
    spec = load_verifiers_env("vf:" + FIXTURE)
    expected, scores = direct_reward(
        task_index, REPLIES[kind].replace("5", "5" if task_index == 0 else "18")
    )
    task, reward = envlab_reward(
        spec, task_index, REPLIES[kind].replace("5", "5" if task_index == 0 else "18")
    )
    assert reward.total == expected
    assert reward.details["scores"] == scores
    graded = validate_reward(reward, tuple(task.metadata["reward_range"]))
    assert graded.total == pytest.approx(expected / 1.5)


def test_right_wrong_malformed_values() -> None:
    spec = load_verifiers_env("vf:" + FIXTURE)
    totals = {k: envlab_reward(spec, 0, r)[1].total for k, r in REPLIES.items()}
    assert totals == {"right": 1.5, "wrong": 0.5, "malformed": 0.0, "empty": 0.0, "junk": 0.0}


def test_tasks_answer_range_and_oracle() -> None:
    spec = load_verifiers_env("vf:" + FIXTURE)
    tasks = spec.tasks()
    assert len(tasks) == 6 and tasks[0].id == "sum-2-3" and tasks[0].answer == "5"
    assert tasks[0].metadata["reward_range"] == [0.0, 1.5]
    assert "5" not in tasks[0].prompt.replace("2 + 3", "")
    assert [t.id for t in spec.tasks(seed=1)] != [t.id for t in tasks]
    assert len(load_verifiers_env("vf:" + FIXTURE, size=2).tasks()) == 2
    episode = spec.new_episode()
    (oracle,) = episode.oracle_actions(tasks[0])
    assert envlab_reward(spec, 0, oracle.text)[1].total == 1.5


def test_regrade_is_the_same() -> None:
    spec = load_verifiers_env("vf:" + FIXTURE)

    async def run() -> tuple[float, float]:
        episode = spec.new_episode()
        await episode.reset(spec.tasks()[1])
        await episode.step(Action(text="\\boxed{12}"))
        return (await episode.grade()).total, (await episode.regrade()).total

    assert asyncio.run(run()) == (1.5, 1.5)


def test_model_judge_is_refused_offline_or_given_an_endpoint() -> None:
    judged = {"task": {"judges": [{"id": "reference"}]}}
    with pytest.raises(ConfigError, match=r"model judge.*reference.*judge_model"):
        load_verifiers_env("vf:" + FIXTURE, taskset_args=judged)
    spec = load_verifiers_env(
        "vf:" + FIXTURE, taskset_args=judged, judge_model="openai:m@http://127.0.0.1:9/v1"
    )
    task = spec.vf_task(spec.tasks()[0])
    assert task.config.judges[0].model == "m"
    assert task.config.judges[0].base_url == "http://127.0.0.1:9/v1"
    assert spec.tasks()[0].metadata["reward_range"] == [0.0, 2.5]
    with pytest.raises(ConfigError, match="openai:MODEL@URL"):
        load_verifiers_env("vf:" + FIXTURE, taskset_args=judged, judge_model="gpt")


def test_unknown_taskset_names_itself() -> None:
    with pytest.raises(ConfigError, match="no environment 'no-such-taskset'"):
        load_verifiers_env("vf:no-such-taskset")


def test_load_env_resolves_the_family() -> None:
    from envlab.envs import load_env

    spec = load_env("vf:" + FIXTURE)
    assert isinstance(spec, VerifiersEnv) and spec.name == "vf:" + FIXTURE


def test_catalog_entries_say_loaded_or_why_not() -> None:
    entries = {e.name: e for e in catalog()}
    assert "vf:harbor" in entries
    for entry in entries.values():
        assert entry.loaded or entry.reason
