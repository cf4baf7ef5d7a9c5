"""``envlab logs-from-run`` and ``envlab sim-from-logs`` end to end, in child processes: the
oracle's τ-retail run becomes logs, the logs an environment that ``eval`` and ``vet`` run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=300
    )


def ok(*args: str) -> dict:  # type: ignore[type-arg]
    r = envlab(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def trip(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The whole round trip, once: the oracle's τ-retail run, its logs, the replay environment,
    and the oracle's and the no-op's runs in it."""
    root = tmp_path_factory.mktemp("logs_cmd")
    logs, sim = root / "logs.jsonl", root / "sim"
    ok("eval", "tau-retail", "--agent", "oracle", "--tasks", "6", "--out", str(root / "run"))
    out: dict[str, Any] = {"root": root, "logs": logs, "sim": sim}
    out["made"] = ok("logs-from-run", str(root / "run"), "--out", str(logs))
    out["built"] = ok("sim-from-logs", str(logs), "--out", str(sim))
    for agent in ("oracle", "noop"):
        out[agent] = ok("eval", str(sim), "--agent", agent, "--out", str(root / f"eval-{agent}"))
    return out


def test_logs_from_run_writes_every_episode(trip: dict[str, Any]) -> None:
    made = trip["made"]
    assert made["sessions"] == 6 and made["successful"] == 6
    assert made["writes from"] == "the environment tau-retail"
    assert "cancel_pending_order" in made["writes"]
    assert len(trip["logs"].read_text().splitlines()) == 6


def test_sim_from_logs_builds_what_eval_runs(trip: dict[str, Any]) -> None:
    sim = trip["sim"]
    assert trip["built"]["tasks"] == 6 and trip["built"]["sessions"] == 6
    assert (sim / "replay.json").is_file()
    assert (sim / "logs.jsonl").read_bytes() == trip["logs"].read_bytes()
    assert trip["oracle"]["n_episodes"] == 6 and trip["oracle"]["mean_reward"] == 1.0
    assert trip["noop"]["n_episodes"] == 6 and trip["noop"]["mean_reward"] == 0.0


def test_fuzzy_matching_and_vet_on_the_replay(trip: dict[str, Any]) -> None:
    root, sim = trip["root"], str(trip["sim"])
    fuzzy = ok("eval", sim, "-e", "match=fuzzy", "--agent", "oracle", "--out", str(root / "f"))
    assert fuzzy["mean_reward"] == 1.0
    vet = ok("vet", sim, "--agent", "none", "--out", str(root / "vet"))
    assert vet["clean"] and vet["verdict_counts"]["ok"] == 6


def test_a_replay_run_converts_again(trip: dict[str, Any]) -> None:
    """Any envlab run becomes logs, a replay run too (its environment is a directory)."""
    root = trip["root"]
    again = ok("logs-from-run", str(root / "eval-oracle"), "--out", str(root / "again.jsonl"))
    assert again["sessions"] == 6 and again["successful"] == 6
    assert "exchange_delivered_order_items" in again["writes"]


def test_a_run_whose_environment_does_not_load_needs_writes(
    trip: dict[str, Any], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    info = json.loads((trip["root"] / "run" / "run.json").read_text())
    info["env_id"], info["command"] = "gone-env", ["envlab", "eval", "gone-env"]
    (run / "run.json").write_text(json.dumps(info))
    traj = (trip["root"] / "run" / "trajectories.jsonl").read_text()
    (run / "trajectories.jsonl").write_text(traj)
    r = envlab("logs-from-run", str(run), "--out", str(tmp_path / "l.jsonl"))
    assert r.returncode == 2 and "Pass --writes TOOL,TOOL" in r.stderr
    made = ok(
        "logs-from-run", str(run), "--out", str(tmp_path / "l.jsonl"),
        "--writes", "cancel_pending_order,exchange_delivered_order_items",
    )  # fmt: skip
    assert made["writes from"] == "--writes" and made["sessions"] == 6


def test_a_bad_log_line_is_one_clear_error(tmp_path: Path) -> None:
    logs = tmp_path / "bad.jsonl"
    good = {
        "session_id": "a",
        "writes": ["w"],
        "outcome": {"success": True},
        "messages": [{"role": "user", "content": "hi"}],
    }
    logs.write_text(
        json.dumps(good) + "\n\n" + json.dumps({**good, "session_id": "b", "outcome": {}})
    )
    r = envlab("sim-from-logs", str(logs), "--out", str(tmp_path / "sim"))
    assert r.returncode == 2
    assert "line 3: field outcome.success: Field required" in r.stderr
    assert not (tmp_path / "sim").exists()


def test_a_model_user_needs_its_model(trip: dict[str, Any]) -> None:
    sim, out = str(trip["sim"]), str(trip["root"] / "m")
    r = envlab("eval", sim, "-e", "user=model", "--agent", "noop", "--out", out)
    assert r.returncode == 2 and "user=model needs user_model=openai:MODEL@URL" in r.stderr
