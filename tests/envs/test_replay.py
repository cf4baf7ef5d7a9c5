"""The round trip from a real τ-retail run of the oracle: run -> logs -> replay environment ->
episodes, where the oracle scores 1.0 on every session, the no-op 0 on every session that
needed a write, a wrong write 0, and an unanswerable call is flagged."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import AgentClass, ToolCall
from envlab.envs import load_env
from envlab.envs.replay import build_sim, load_replay_env, logs_from_run, read_logs, write_logs
from envlab.envs.tau.spec import TauRetail
from envlab.rollout import rollout
from tests.envs.replay_samples import OracleThen, run_all, run_all_one
from tests.envs.test_replay_private import play_matches


@pytest.fixture(scope="module")
def retail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The oracle's τ-retail run (6 tasks), its logs and the replay environment."""
    root = tmp_path_factory.mktemp("retail")
    spec = TauRetail()

    async def run() -> None:
        await rollout(spec, AgentClass(OracleAgent), spec.tasks(n=6), out_dir=root / "run")

    asyncio.run(run())
    converted = logs_from_run(root / "run")
    assert converted.writes_from == "the environment tau-retail"
    write_logs(converted.sessions, root / "logs.jsonl")
    build_sim(root / "logs.jsonl", root / "sim")
    return root / "logs.jsonl", root / "sim"


def test_the_converter_writes_every_episode_as_a_session(retail: tuple[Path, Path]) -> None:
    sessions = read_logs(retail[0])
    assert len(sessions) == 6 and all(
        s.outcome.success and s.outcome.reward == 1.0 for s in sessions
    )
    for s in sessions:
        assert s.messages[0].role == "system" and s.messages[1].role == "user"
        assert s.goal and s.task and s.task.startswith("tau-retail-test-")
        assert "exchange_delivered_order_items" in s.writes and "get_order_details" not in s.writes
        assert {t["function"]["name"] for t in s.tools} >= set(s.writes)
    assert any(m.is_error for s in sessions for m in s.messages)  # τ-bench's refusals, kept
    assert all(s.side_effects for s in sessions)


async def test_round_trip_oracle_1_noop_0_wrong_write_0(retail: tuple[Path, Path]) -> None:
    spec = load_env(str(retail[1]))
    assert len(spec.tasks()) == 6
    oracle = await run_all(spec, AgentClass(OracleAgent))
    assert {t.reward for t in oracle.values()} == {1.0}
    noop = await run_all(spec, AgentClass(NoopAgent))
    assert all(bool(t.answer["writes"]) for t in spec.tasks())  # these 6 all needed a write
    assert {t.reward for t in noop.values()} == {0.0}
    wrong = ToolCall(
        "cancel_pending_order", {"order_id": "#W0000000", "reason": "no longer needed"}, id="x"
    )
    bad = await run_all(spec, AgentClass(OracleThen, wrong))
    assert all(t.reward == 0.0 and t.gated_by == "no_unlogged_write" for t in bad.values())


async def test_round_trip_another_sessions_write_scores_0(retail: tuple[Path, Path]) -> None:
    spec = load_env(str(retail[1]))
    a, b = spec.tasks()[0], spec.tasks()[5]
    name, args = b.answer["writes"][0]
    other = ToolCall(name, json.loads(args), id="other")
    t, matches = await play_matches(spec, OracleThen(replace=other), a)
    match = next(m for m in matches if m["call_id"] == "other")
    assert match["source"] == spec.tasks()[5].answer["session_id"]  # the grader's record
    assert t.reward == 0.0 and t.gated_by == "no_unlogged_write"


async def test_round_trip_an_unanswerable_call_is_flagged(retail: tuple[Path, Path]) -> None:
    spec = load_env(str(retail[1]))
    task = spec.tasks()[0]
    probe = ToolCall("get_order_details", {"order_id": "#W0000000"}, id="probe")
    t = (await run_all_one(spec, OracleThen(first=probe), task))[task.id]
    assert t.steps[0].info["unanswerable"] == 1 and t.steps[0].tool_errors == 1
    assert t.info["grade"]["replay"]["unanswerable"] == 1
    assert t.reward == 1.0  # a read the logs cannot answer changes nothing: flagged, not scored


def test_a_perturbed_run_logs_what_the_tools_did(tmp_path: Path) -> None:
    """Calls a fault stopped (the tool never ran) are left out of the logs, kept in metadata:
    the replay of the oracle's perturbed run scores 1.0 without the faults."""
    from envlab.envs.perturb import parse_perturbations, perturb

    spec = perturb(TauRetail(), parse_perturbations("transient=0.5"))

    async def run() -> None:
        tasks = TauRetail().tasks(n=3)
        await rollout(spec, AgentClass(OracleAgent), tasks, out_dir=tmp_path / "run")

    asyncio.run(run())
    converted = logs_from_run(tmp_path / "run")
    faults = [f for s in converted.sessions for f in s.metadata.get("faults", [])]
    assert faults and all(f["fault"] == "transient" for f in faults)
    logged = [m.text for s in converted.sessions for m in s.messages if m.role == "tool"]
    assert not any("[retryable]" in text for text in logged)
    write_logs(converted.sessions, tmp_path / "logs.jsonl")
    build_sim(tmp_path / "logs.jsonl", tmp_path / "sim")
    replay = load_replay_env(tmp_path / "sim")

    async def replay_all() -> dict[str, Any]:
        return await run_all(replay, AgentClass(OracleAgent))

    assert {t.reward for t in asyncio.run(replay_all()).values()} == {1.0}


def test_samples_of_a_task_are_one_task_with_its_first_success_as_reference(
    tmp_path: Path,
) -> None:
    spec = TauRetail()

    async def run() -> None:
        await rollout(
            spec, AgentClass(OracleAgent), spec.tasks(n=2), out_dir=tmp_path / "run", samples=2
        )

    asyncio.run(run())
    converted = logs_from_run(tmp_path / "run")
    assert len(converted.sessions) == 4
    write_logs(converted.sessions, tmp_path / "logs.jsonl")
    build_sim(tmp_path / "logs.jsonl", tmp_path / "sim")
    replay = load_replay_env(tmp_path / "sim")
    tasks = replay.tasks()
    assert [t.metadata["sessions"] for t in tasks] == [2, 2]
    by_task = {s.task: s.session_id for s in reversed(converted.sessions)}  # the first of each
    assert {t.id: t.answer["session_id"] for t in tasks} == by_task


async def test_a_run_whose_calls_share_an_id_is_logged_paired_by_position(tmp_path: Path) -> None:
    """The agent's ids need not be unique: the i-th result answers the i-th call, and an id used
    before in the session is made unique on the call and its result."""
    from envlab.core import Action, TaskSet
    from envlab.envs.replay import ReplaySpec
    from envlab.envs.replay.rubric import reference_calls
    from tests.envs.replay_samples import TRANSFER, Scripted, sessions_of
    from tests.support.envs import Given

    spec = ReplaySpec(sessions_of([TRANSFER]), digest="ids")
    bob = ToolCall("get_balance", {"account": "bob"}, id="x")
    alice = ToolCall("get_balance", {"account": "alice"}, id="x")
    gold = ToolCall("transfer", {"source": "alice", "to": "bob", "amount": 5}, id="x")
    steps = [Action(tool_calls=[bob, alice]), Action(text="Send 5 (yes/no)?")]
    steps += [Action(tool_calls=[gold]), Action(text="Done.")]
    tasks = TaskSet(list(spec.tasks()), seed=0, name=spec.name)
    await rollout(spec, Given(Scripted(steps)), tasks, out_dir=tmp_path / "run")
    (session,) = logs_from_run(tmp_path / "run", writes=["transfer"]).sessions
    asked = [c.id for m in session.messages for c in m.tool_calls or []]
    assert len(set(asked)) == len(asked) == 3
    answers = {m.tool_call_id: m.text for m in session.messages if m.role == "tool"}
    assert '"balance": 20' in answers[asked[1]] and '"balance": 20' not in answers[asked[0]]
    assert reference_calls(session, {"transfer"}) == [
        ("transfer", '{"amount":5,"source":"alice","to":"bob"}')
    ]
