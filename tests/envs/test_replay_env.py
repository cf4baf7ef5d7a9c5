"""The replay environment on a hand-written log: the logged user, tools answered from the logs
(exact, fuzzy, unanswerable and flagged), the reward and its gates, perturbations, the
model-backed user."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import Action, AgentClass, ConfigError, ToolCall
from envlab.envs import load_env
from envlab.envs.replay import ReplaySpec, load_replay_env, read_logs
from envlab.envs.replay.index import canonical
from envlab.rollout import rollout
from tests.envs.replay_samples import (
    TRANSFER,
    Scripted,
    call,
    make_bank,
    result,
    run_all,
    run_all_one,
)
from tests.envs.test_replay_private import play_matches


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return make_bank(tmp_path)


async def test_the_oracle_replays_both_sessions_and_the_noop_fails_both(bank: Path) -> None:
    spec = load_env(str(bank))
    oracle = await run_all(spec, AgentClass(OracleAgent))
    assert {k: t.reward for k, t in oracle.items()} == {"s-transfer": 1.0, "s-balance": 1.0}
    t = oracle["s-balance"]
    refused = t.steps[0].observation.tool_results[0]
    assert refused.is_error and refused.content == "Error: account carol is frozen"  # as logged
    system = oracle["s-transfer"].messages[0]
    assert system == {"role": "system", "content": "You are a bank assistant."}
    assert t.messages[0]["role"] == "user"  # a session without a system prompt has none
    noop = await run_all(spec, AgentClass(NoopAgent))
    assert noop["s-transfer"].reward == 0.0  # it needed a write
    # nothing to write and nothing written, but nothing looked up nor said either
    assert noop["s-balance"].reward == 0.0 and noop["s-balance"].gated_by == "grounded"
    task = spec.tasks()[1]
    read = ToolCall("get_balance", {"account": "carol"}, id="r")
    agent = Scripted([Action(tool_calls=[read]), Action(text="It is frozen, sorry.")])
    assert (await run_all_one(spec, agent, task))[task.id].reward == 1.0


async def test_the_logged_user_says_its_turns_in_order_then_stops(bank: Path) -> None:
    spec = load_env(str(bank))
    task = spec.tasks()[0]
    agent = Scripted([Action(text="Hello?"), Action(text="Anything else?"), Action(text="Bye")])
    (t,) = (await run_all_one(spec, agent, task)).values()
    said = [s.observation.text for s in t.steps]
    assert said == ["Yes, please.", "###STOP###"]
    assert t.status.value == "ok" and t.reward == 0.0  # the write was never made


async def test_a_wrong_write_scores_0_and_an_unanswerable_call_is_flagged(bank: Path) -> None:
    spec = load_env(str(bank))
    task = spec.tasks()[0]
    wrong = ToolCall("transfer", {"source": "alice", "to": "eve", "amount": 5}, id="w")
    steps = [
        Action(tool_calls=[ToolCall("get_balance", {"account": "alice"}, id="r")]),
        Action(text="Shall I send it (yes/no)?"),
        Action(tool_calls=[wrong]),
        Action(text="Done."),
    ]
    t = (await run_all_one(spec, Scripted(steps), task))[task.id]
    assert t.reward == 0.0 and t.gated_by == "no_unlogged_write"
    info = t.steps[2].info
    assert info["unanswerable"] == 1 and info["replay"][0]["unanswerable"] is True
    result = t.steps[2].observation.tool_results[0]
    assert result.is_error and "no logged answer for transfer" in result.content
    assert t.info["grade"]["replay"] == {"calls": 2, "unanswerable": 1, "fuzzy": 0}
    assert t.components["answered"] == 0.5


async def test_a_write_where_none_was_needed_trips_its_gate(bank: Path) -> None:
    spec = load_env(str(bank))
    task = spec.tasks()[1]
    write = ToolCall("transfer", {"source": "alice", "to": "bob", "amount": 5}, id="w")
    t, matches = await play_matches(spec, Scripted([Action(tool_calls=[write])]), task)
    # answered from the other session's log (the grader knows; the agent is not told), but this
    # session needed no write
    assert matches[0]["source"] == "s-transfer" and "source" not in t.steps[0].info["replay"][0]
    assert t.reward == 0.0 and t.gated_by == "no_write_when_none_needed"


async def test_a_write_without_the_users_yes_trips_confirmed_writes(bank: Path) -> None:
    spec = load_env(str(bank))
    task = spec.tasks()[0]
    write = ToolCall("transfer", {"source": "alice", "to": "bob", "amount": 5}, id="w")
    t = (await run_all_one(spec, Scripted([Action(tool_calls=[write])]), task))[task.id]
    assert t.components["writes_match"] == 1.0
    assert t.reward == 0.0 and t.gated_by == "confirmed_writes"


async def test_fuzzy_matching_answers_a_near_call_and_records_it(bank: Path) -> None:
    near = ToolCall("get_balance", {"account": "alice "}, id="n")
    for match, answered in (("exact", False), ("fuzzy", True)):
        spec = load_replay_env(bank, match=match)
        task = spec.tasks()[0]
        t, (record,) = await play_matches(spec, Scripted([Action(tool_calls=[near])]), task)
        result = t.steps[0].observation.tool_results[0]
        assert t.steps[0].info["replay"][0]["unanswerable"] is not answered
        if answered:  # recorded for the grader
            assert record["match"] == "fuzzy" and record["matched_arguments"] == {
                "account": "alice"
            }
            assert 0.85 <= record["similarity"] < 1.0 and not result.is_error
            assert t.info["grade"]["replay"]["fuzzy"] == 1
        else:
            assert record["unanswerable"] and result.is_error


async def test_bad_arguments_are_a_tool_error_not_a_lookup(bank: Path) -> None:
    spec = load_env(str(bank))
    task = spec.tasks()[0]
    bad = [
        ToolCall("get_balance", {"acct": "alice"}, id="x"),
        ToolCall("get_balance", "{no", id="y"),
    ]
    t = (await run_all_one(spec, Scripted([Action(tool_calls=bad)]), task))[task.id]
    contents = [r.content for r in t.steps[0].observation.tool_results]
    assert "'account': Field required" in contents[0] and "not valid JSON" in contents[1]
    assert t.steps[0].tool_errors == 2 and t.steps[0].info["unanswerable"] == 0


async def test_the_model_backed_user_plays_the_goal_over_http(bank: Path, tmp_path: Path) -> None:
    """``-e user=model``: τ's model-backed user, here the embedded SmolLM2 behind the HTTP server
    on 127.0.0.1, gets the session's goal; assertions on the record, not on what it says."""
    pytest.importorskip("llama_cpp")
    from envlab.core import Limits
    from envlab.models.llamacpp import shared_engine
    from envlab.models.server import BackgroundServer, create_app
    from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path
    from envlab.rollout import EpisodeConfig
    from envlab.runs import TrajectoryStore

    engine = shared_engine(smollm2_path(), model_id=SMOLLM2_MODEL_ID)
    with BackgroundServer(create_app(engine, served_name="smollm2")) as srv:
        spec = load_replay_env(
            bank, user="model", user_model=f"openai:smollm2@{srv.base_url}", max_user_turns=2,
            user_max_tokens=24,
        )  # fmt: skip
        untimed = EpisodeConfig(overrides=Limits(step_timeout_s=None, episode_timeout_s=None))
        await rollout(
            spec, AgentClass(OracleAgent), spec.tasks(n=1), out_dir=tmp_path, config=untimed
        )
    (t,) = TrajectoryStore(tmp_path / "trajectories.jsonl").load()
    assert t.status.value == "ok", t.error
    users = [s.info["user"] for s in t.steps if "user" in s.info]
    assert users and all(u["user"] == "model" and u["model"] == "smollm2" for u in users)
    assert t.components["writes_match"] in (0.0, 1.0)  # graded as any episode


async def test_perturbations_wrap_a_replay_and_a_stopped_write_is_not_written(bank: Path) -> None:
    from envlab.envs.perturb import parse_perturbations, perturb

    spec = load_env(str(bank))
    retried = await run_all(
        perturb(spec, parse_perturbations("transient=1")), AgentClass(OracleAgent)
    )
    t = retried["s-transfer"]
    assert t.reward == 1.0  # every first attempt failed; the oracle sent it again
    assert any(f["fault"] == "transient" for s in t.steps for f in s.info.get("faults", []))
    stopped = await run_all(
        perturb(spec, parse_perturbations("timeout=1")), AgentClass(OracleAgent)
    )
    t = stopped["s-transfer"]
    assert t.reward == 0.0 and t.components["writes_match"] == 0.0
    assert t.info["grade"]["replay"]["calls"] == 0  # no call reached the logs
    with pytest.raises(ConfigError, match="snapshots"):
        await run_all(perturb(spec, parse_perturbations("stale=0.5")), AgentClass(OracleAgent))


async def test_a_write_the_tool_refused_is_not_required(tmp_path: Path) -> None:
    """The reference tried a wrong write (refused, is_error) then the right one: an agent that
    makes only the right one matches; one that makes only the refused one does not."""
    session = {**TRANSFER, "session_id": "s-retry"}
    wrong = {"source": "alice", "to": "bob", "amount": 500}
    session["messages"] = [
        *TRANSFER["messages"][:6],
        call("c9", "transfer", wrong),
        result("c9", "Error: insufficient funds", is_error=True),
        *TRANSFER["messages"][6:],
    ]
    logs = tmp_path / "l.jsonl"
    logs.write_text(json.dumps(session) + "\n")
    spec = ReplaySpec(read_logs(logs), digest="x")
    task = spec.tasks()[0]
    assert task.answer["writes"] == [
        ["transfer", canonical(TRANSFER["messages"][6]["tool_calls"][0]["function"]["arguments"])]
    ]
    ask = Action(text="Shall I (yes/no)?")
    right = ToolCall("transfer", {"source": "alice", "to": "bob", "amount": 5}, id="r")
    t = (await run_all_one(spec, Scripted([ask, Action(tool_calls=[right])]), task))[task.id]
    assert t.reward == 1.0
    refused = ToolCall("transfer", wrong, id="w")
    t = (await run_all_one(spec, Scripted([ask, Action(tool_calls=[refused])]), task))[task.id]
    assert t.steps[1].observation.tool_results[0].content == "Error: insufficient funds"
    assert t.components["writes_match"] == 0.0
    oracle = await run_all(spec, AgentClass(OracleAgent))
    assert oracle[task.id].reward == 1.0


async def test_arguments_nested_past_the_parsers_depth_are_the_agents_tool_error(
    bank: Path,
) -> None:
    """The agent's malformed call is answered, never the environment's failure (env_error)."""
    spec = load_env(str(bank))
    task = spec.tasks()[0]
    deep = ToolCall("get_balance", '{"account": ' + "[" * 100_000, id="deep")
    t = (await run_all_one(spec, Scripted([Action(tool_calls=[deep])]), task))[task.id]
    assert t.status.value == "ok", t.error
    assert (
        t.steps[0].tool_errors == 1
        and "nested too deeply" in t.steps[0].observation.tool_results[0].content
    )


async def test_the_logged_user_answers_as_logged_when_the_agent_spoke_twice(tmp_path: Path) -> None:
    """Two assistant messages in a row (no user turn between): the user stays silent after the
    first, as logged, so the oracle's replay stays in step and makes the write."""
    session = {**TRANSFER, "session_id": "s-twice"}
    msgs = TRANSFER["messages"]
    session["messages"] = [
        *msgs[:4],
        {"role": "assistant", "content": "You have 20."},
        *msgs[4:],
    ]
    logs = tmp_path / "l.jsonl"
    logs.write_text(json.dumps(session) + "\n")
    spec = ReplaySpec(read_logs(logs), digest="x")
    t = (await run_all(spec, AgentClass(OracleAgent)))["s-twice"]
    assert t.reward == 1.0, t.components
    said = [s.observation.text for s in t.steps if not s.action.tool_calls]
    assert said == ["", "Yes, please.", "###STOP###"]


async def test_a_session_the_agent_opened_replays_from_the_users_first_turn(tmp_path: Path) -> None:
    session = {**TRANSFER, "session_id": "s-greet"}
    greeting = {"role": "assistant", "content": "Welcome to the bank! How can I help?"}
    session["messages"] = [TRANSFER["messages"][0], greeting, *TRANSFER["messages"][1:]]
    logs = tmp_path / "l.jsonl"
    logs.write_text(json.dumps(session) + "\n")
    spec = ReplaySpec(read_logs(logs), digest="x")
    t = (await run_all(spec, AgentClass(OracleAgent)))["s-greet"]
    assert t.reward == 1.0 and t.messages[1]["content"].startswith("Hi, please send")
