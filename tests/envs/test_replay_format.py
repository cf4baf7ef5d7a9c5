"""The log format (parsing, the errors that name the line and the field), the tasks it makes,
and the replay environment's identity (its hash names the code, the config and the logs)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import AgentClass, ConfigError
from envlab.envs import load_env
from envlab.envs.replay import (
    LogFormatError,
    ReplaySpec,
    build_sim,
    load_replay_env,
    read_logs,
    write_logs,
)
from envlab.envs.replay.index import canonical
from tests.envs.replay_samples import (
    BALANCE,
    TRANSFER,
    call,
    make_bank,
    result,
    run_all,
    sessions_of,
)


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return make_bank(tmp_path)


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


def test_a_failed_session_answers_tools_but_is_no_task(tmp_path: Path) -> None:
    failed = {
        **BALANCE,
        "session_id": "s-failed",
        "task": "s-transfer",
        "outcome": {"success": False},
    }
    failed["messages"] = [
        {"role": "user", "content": "send money"},
        call("f1", "get_balance", {"account": "dave"}),
        result("f1", '{"balance": 3}'),
    ]
    logs = tmp_path / "l.jsonl"
    write_logs([*sessions_of([failed, TRANSFER])], logs)
    spec = ReplaySpec(read_logs(logs), digest="x")
    assert [t.id for t in spec.tasks()] == ["s-transfer"]
    assert spec.tasks()[0].answer["session_id"] == "s-transfer"
    assert spec.tasks()[0].metadata["sessions"] == 2
    seen: Counter[tuple[str, str]] = Counter()
    ans = spec.answers.lookup(("get_balance", canonical({"account": "dave"})), "s-transfer", seen)
    assert ans is not None and ans.source == "s-failed"


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
        json.dumps({**TRANSFER, "messages": [*TRANSFER["messages"], result("zz", "x")]}),
        "answers tool call 'zz', which no earlier assistant message made",
    ),
    (
        json.dumps(
            {
                **TRANSFER,
                "messages": [
                    *TRANSFER["messages"][:2],
                    call("d", "get_balance", {"account": "alice"}),
                    call("d", "get_balance", {"account": "bob"}),
                    result("d", "x"),
                ],
            }
        ),
        "makes tool call 'd' while an earlier call with that id is unanswered",
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
