"""Environments simulated from logs: the format, the replay, the reward, and the round trip
from a real τ-retail run of the oracle (run -> logs -> replay environment -> episodes)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    ConfigError,
    EpisodeContext,
    Observation,
    ToolCall,
)
from envlab.envs import load_env
from envlab.envs.replay import (
    LogFormatError,
    ReplaySpec,
    build_sim,
    load_replay_env,
    logs_from_run,
    read_logs,
    write_logs,
)
from envlab.envs.replay.index import canonical
from envlab.envs.tau.spec import TauRetail
from envlab.rollout import PlannedEpisode, episode_ids, rollout, run_episodes

# --- agents -------------------------------------------------------------------------------------


class Scripted(Agent):
    """Says the given actions in order, then an empty answer."""

    name = "scripted-test"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:test")

    async def act(self, observation: Observation) -> Action:
        return self.actions.pop(0) if self.actions else Action(text="")


class OracleThen(OracleAgent):
    """The oracle, with the first write call replaced (``replace``) or a call made first."""

    def __init__(self, replace: ToolCall | None = None, first: ToolCall | None = None) -> None:
        super().__init__()
        self.replace, self.first = replace, first

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="oracle-then", harness="scripted:oracle-then", privileged=True)

    async def start(self, ctx: EpisodeContext) -> None:
        await super().start(ctx)
        writes = {t.name for t in ctx.tools if t.writes}
        if self.replace is not None:
            i = next(
                i
                for i, a in enumerate(self._queue)
                if a.tool_calls and a.tool_calls[0].name in writes
            )
            self._queue[i] = Action(tool_calls=[self.replace])
        if self.first is not None:
            self._queue.insert(0, Action(tool_calls=[self.first]))


async def run_all(spec: ReplaySpec, agent: AgentClass) -> dict[str, Any]:
    tasks = spec.tasks()
    h = spec.content_hash()
    plans = [PlannedEpisode(t, 0, episode_ids(spec.name, h, t.id, 0, 0), agent) for t in tasks]
    return {t.task_id: t for t in await run_episodes(spec, plans, concurrency=4)}


# --- a small hand-written log ------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_balance",
            "description": "The balance of an account.",
            "parameters": {
                "type": "object",
                "properties": {"account": {"type": "string"}},
                "required": ["account"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer",
            "description": "Send money.",
            "parameters": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "to": {"type": "string"},
                    "amount": {"type": "integer"},
                },
                "required": ["source", "to", "amount"],
            },
        },
    },
]


def _call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def _result(cid: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content, **extra}


TRANSFER = {
    "session_id": "s-transfer",
    "goal": "Send 5 dollars from alice to bob.",
    "tools": TOOLS,
    "writes": ["transfer"],
    "outcome": {"success": True, "reward": 1.0},
    "messages": [
        {"role": "system", "content": "You are a bank assistant."},
        {"role": "user", "content": "Hi, please send 5 dollars from my account alice to bob."},
        _call("c1", "get_balance", {"account": "alice"}),
        _result("c1", '{"account": "alice", "balance": 20}'),
        {"role": "assistant", "content": "You have 20. Shall I send 5 to bob (yes/no)?"},
        {"role": "user", "content": "Yes, please."},
        _call("c2", "transfer", {"source": "alice", "to": "bob", "amount": 5}),
        _result("c2", '{"ok": true, "balance": 15}'),
        {"role": "assistant", "content": "Done: 5 sent to bob."},
    ],
}
BALANCE = {
    "session_id": "s-balance",
    "writes": ["transfer"],
    "outcome": {"success": True},
    "messages": [
        {"role": "user", "content": "What is my balance? I am carol."},
        _call("b1", "get_balance", {"account": "carol"}),
        _result("b1", "Error: account carol is frozen", is_error=True),
        {"role": "assistant", "content": "Your account is frozen."},
    ],
}


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    logs = tmp_path / "bank.jsonl"
    logs.write_text("".join(json.dumps(s) + "\n" for s in (TRANSFER, BALANCE)))
    build_sim(logs, tmp_path / "sim")
    return tmp_path / "sim"


def test_a_hand_written_log_parses_and_makes_tasks(bank: Path) -> None:
    sessions = read_logs(bank / "logs.jsonl")
    assert [s.session_id for s in sessions] == ["s-transfer", "s-balance"]
    spec = load_env(str(bank))
    assert isinstance(spec, ReplaySpec)
    tasks = spec.tasks()
    assert [t.id for t in tasks] == ["s-transfer", "s-balance"]
    assert tasks[0].prompt == "Send 5 dollars from alice to bob."  # the goal
    assert tasks[1].prompt == "What is my balance? I am carol."  # no goal: the first user turn
    assert spec.tool_specs["transfer"].writes and not spec.tool_specs["get_balance"].writes


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


async def run_all_one(spec: ReplaySpec, agent: Agent, task: Any) -> dict[str, Any]:
    from tests.support.play import play

    return {task.id: await play(spec, agent, task)}


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
    t = (await run_all_one(spec, Scripted([Action(tool_calls=[write])]), task))[task.id]
    # answered from the other session's log, but this session needed no write
    assert t.steps[0].info["replay"][0]["source"] == "s-transfer"
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
        t = (await run_all_one(spec, Scripted([Action(tool_calls=[near])]), task))[task.id]
        record = t.steps[0].info["replay"][0]
        result = t.steps[0].observation.tool_results[0]
        if answered:
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


def test_a_failed_session_answers_tools_but_is_no_task(tmp_path: Path) -> None:
    failed = {
        **BALANCE,
        "session_id": "s-failed",
        "task": "s-transfer",
        "outcome": {"success": False},
    }
    failed["messages"] = [
        {"role": "user", "content": "send money"},
        _call("f1", "get_balance", {"account": "dave"}),
        _result("f1", '{"balance": 3}'),
    ]
    logs = tmp_path / "l.jsonl"
    write_logs([*read_logs_of([failed, TRANSFER])], logs)
    spec = ReplaySpec(read_logs(logs), digest="x")
    assert [t.id for t in spec.tasks()] == ["s-transfer"]
    assert spec.tasks()[0].answer["session_id"] == "s-transfer"
    assert spec.tasks()[0].metadata["sessions"] == 2
    seen: Counter[tuple[str, str]] = Counter()
    ans = spec.answers.lookup(("get_balance", canonical({"account": "dave"})), "s-transfer", seen)
    assert ans is not None and ans.source == "s-failed"


def read_logs_of(rows: list[dict[str, Any]]) -> list[Any]:
    from envlab.envs.replay.format import LogSession

    return [LogSession.model_validate(r) for r in rows]


BAD_LINES = [
    ("{not json", "line 2: not JSON"),
    (json.dumps({**TRANSFER, "outcome": None}), "line 2: field outcome"),
    (
        json.dumps({k: v for k, v in TRANSFER.items() if k != "outcome"}),
        "line 2: field outcome: Field required",
    ),
    (
        json.dumps(
            {**TRANSFER, "messages": [*TRANSFER["messages"], {"role": "tool", "content": "x"}]}
        ),
        "line 2: field messages.9: a tool message needs the tool_call_id",
    ),
    (
        json.dumps({**TRANSFER, "messages": [*TRANSFER["messages"], _result("zz", "x")]}),
        "answers tool call 'zz', which no earlier assistant message made",
    ),
    (
        json.dumps({**TRANSFER, "messages": [{"role": "robot", "content": "x"}]}),
        "line 2: field messages.0.role",
    ),
    (
        json.dumps({**TRANSFER, "tools": [{"name": "x"}]}),
        "line 2: field tools: Value error, tools[0] is not an OpenAI",
    ),
    (json.dumps({**TRANSFER, "extra": 1}), "line 2: field extra: Extra inputs are not permitted"),
    (json.dumps(BALANCE), "line 2: field session_id: 's-balance' is already the id of line 1"),
    ("[1, 2]", "line 2: a session is a JSON object, got list"),
    ('{"session_id": ' + "[" * 100_000, "line 2: the JSON is nested too deeply to read"),
    (
        json.dumps(
            {
                **TRANSFER,
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "t", "parameters": {"properties": []}},
                    }
                ],
            }
        ),
        "line 2: field tools: Value error, tools[0].function.parameters: properties must map",
    ),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_log_line_names_the_line_and_the_field(
    tmp_path: Path, line: str, message: str
) -> None:
    logs = tmp_path / "bad.jsonl"
    logs.write_text(json.dumps(BALANCE) + "\n" + line + "\n")
    with pytest.raises(LogFormatError) as e:
        read_logs(logs)
    assert message.replace("Value error, ", "") in str(e.value) and str(logs) in str(e.value)


def test_logs_that_make_no_gradable_task_are_refused(tmp_path: Path) -> None:
    logs = tmp_path / "l.jsonl"
    logs.write_text(json.dumps({**BALANCE, "writes": []}) + "\n")
    with pytest.raises(ConfigError, match="which tools write"):
        build_sim(logs, tmp_path / "a")
    logs.write_text(json.dumps({**TRANSFER, "outcome": {"success": False}}) + "\n")
    with pytest.raises(ConfigError, match=r"no session has outcome\.success"):
        build_sim(logs, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_hash_names_the_logs_and_the_config_and_edited_logs_are_refused(bank: Path) -> None:
    h = load_replay_env(bank).content_hash()
    assert h == load_replay_env(bank).content_hash()
    assert h != load_replay_env(bank, match="fuzzy").content_hash()
    other = ReplaySpec(read_logs(bank / "logs.jsonl")[:1], digest="other")
    assert other.content_hash() != h
    from tests.support.play import hash_in_subprocess

    for seed in (0, 1):
        imports = "from envlab.envs.replay import load_replay_env"
        assert hash_in_subprocess(imports, f"load_replay_env({str(bank)!r})", hash_seed=seed) == h
    with (bank / "logs.jsonl").open("a") as f:
        f.write("\n")
    with pytest.raises(ConfigError, match="changed since the environment was built"):
        load_env(str(bank))


# --- the round trip from a τ-retail run ---------------------------------------------------------


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
    t = (await run_all_one(spec, OracleThen(replace=other), a))[a.id]
    write_step = next(
        s for s in t.steps if s.action.tool_calls and s.action.tool_calls[0].id == "other"
    )
    assert write_step.info["replay"][0]["source"] == spec.tasks()[5].answer["session_id"]
    assert t.reward == 0.0 and t.gated_by == "no_unlogged_write"


async def test_round_trip_an_unanswerable_call_is_flagged(retail: tuple[Path, Path]) -> None:
    spec = load_env(str(retail[1]))
    task = spec.tasks()[0]
    probe = ToolCall("get_order_details", {"order_id": "#W0000000"}, id="probe")
    t = (await run_all_one(spec, OracleThen(first=probe), task))[task.id]
    assert t.steps[0].info["unanswerable"] == 1 and t.steps[0].tool_errors == 1
    assert t.info["grade"]["replay"]["unanswerable"] == 1
    assert t.reward == 1.0  # a read the logs cannot answer changes nothing: flagged, not scored


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


async def test_a_write_the_tool_refused_is_not_required(tmp_path: Path) -> None:
    """The reference tried a wrong write (refused, is_error) then the right one: an agent that
    makes only the right one matches; one that makes only the refused one does not."""
    session = {**TRANSFER, "session_id": "s-retry"}
    wrong = {"source": "alice", "to": "bob", "amount": 500}
    session["messages"] = [
        *TRANSFER["messages"][:6],
        _call("c9", "transfer", wrong),
        _result("c9", "Error: insufficient funds", is_error=True),
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


async def test_content_parts_are_read_as_their_text(tmp_path: Path) -> None:
    """OpenAI's content parts (``[{"type": "text", "text": ...}]``) are the text they hold."""
    parts = [
        {"type": "text", "text": "Hi, please send 5 dollars "},
        {"type": "text", "text": "to bob."},
    ]
    session = {
        **TRANSFER,
        "goal": None,
        "messages": [{**TRANSFER["messages"][1], "content": parts}, *TRANSFER["messages"][2:]],
    }
    logs = tmp_path / "l.jsonl"
    logs.write_text(json.dumps(session) + "\n")
    spec = ReplaySpec(read_logs(logs), digest="x")
    assert spec.tasks()[0].prompt == "Hi, please send 5 dollars to bob."
    assert (await run_all(spec, AgentClass(OracleAgent)))["s-transfer"].reward == 1.0
