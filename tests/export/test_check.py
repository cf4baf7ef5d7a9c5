"""The token-exactness check: a planted re-tokenization drift is found and named, by episode and
turn, through the API, ``envlab export --check`` and a ``tokens`` export (refused, or marked)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError, Trajectory
from envlab.export import (
    ExportOptions,
    TokenDriftError,
    check_run,
    export_run,
    renderer_for,
)
from envlab.runs import RunDir
from tests.conftest import subprocess_env
from tests.export.runs import PLAN, trajectory, write_run


def reserialized(traj: Trajectory) -> Trajectory:
    """The drift trainers meet: the model wrote its call's arguments one way, the record holds
    them parsed and dumped again (no spaces), so the chat no longer renders to the model's ids."""
    msgs = [dict(m) for m in traj.messages]
    call = msgs[2]["tool_calls"][0]
    args = json.dumps(json.loads(call["function"]["arguments"]), separators=(",", ":"))
    msgs[2]["tool_calls"] = [{**call, "function": {**call["function"], "arguments": args}}]
    return dataclasses.replace(traj, messages=msgs)


@pytest.fixture
def drifted(tmp_path: Path, tok: Any) -> RunDir:
    """``PLAN``'s run in which episode g0-2's first reply was recorded re-serialized."""
    trajs = [trajectory(tok, ep) for ep in PLAN]
    trajs = [reserialized(t) if t.episode_id == "g0-2" else t for t in trajs]
    return RunDir(write_run(tmp_path / "drifted", trajs))


def test_a_clean_run_has_no_drift(run: RunDir, tokenizer_dir: Path) -> None:
    report = check_run(run, renderer_for(run, str(tokenizer_dir)))
    assert (report.n_checked, report.n_turns, report.n_unscored) == (10, 20, 2)
    assert report.drifts == [] and report.drift_rate == 0.0


def test_the_planted_drift_is_named(drifted: RunDir, tokenizer_dir: Path) -> None:
    report = check_run(drifted, renderer_for(drifted, str(tokenizer_dir)))
    (drift,) = report.drifts
    assert (drift.episode_id, drift.turn) == ("g0-2", 1)  # turn 0's prompt is untouched
    assert report.drift_rate == pytest.approx(1 / 10)
    tv = next(t.tokens for t in drifted.trajectories() if t.episode_id == "g0-2")
    assert tv is not None  # the ids part inside the re-serialized reply of turn 0
    assert tv.turn_starts[0] <= drift.position < tv.turn_starts[1]
    assert "episode g0-2 turn 1" in drift.describe() and f"position {drift.position}" in (
        drift.describe()
    )


def test_envlab_export_check_reports_it(drifted: RunDir, tokenizer_dir: Path) -> None:
    cmd = [sys.executable, "-m", "envlab.cli.main", "export", str(drifted.path), "--check"]
    cmd += ["--tokenizer", str(tokenizer_dir)]
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr  # a drift fails the check
    got = json.loads(r.stdout)
    assert got["n_drifted"] == 1 and got["drift_rate"] == pytest.approx(0.1)
    assert (got["drifts"][0]["episode_id"], got["drifts"][0]["turn"]) == ("g0-2", 1)
    table = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert table.returncode == 1 and "10.0%" in table.stdout
    assert "episode g0-2 turn 1" in " ".join(table.stderr.split())
    # a tokens export of the run is refused (exit 2, no file), or writes it marked
    out = drifted.path.parent / "tokens.jsonl"
    export = [*cmd[:-3], "--format", "tokens", "--out", str(out), *cmd[-2:]]
    r = subprocess.run(export, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "episode g0-2 turn 1" in r.stderr and not out.exists()
    r = subprocess.run([*export, "--mark-drift"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and len(out.read_text().splitlines()) == 10, r.stderr


def test_a_tokens_export_refuses_or_marks_it(
    drifted: RunDir, tokenizer_dir: Path, tmp_path: Path
) -> None:
    renderer = renderer_for(drifted, str(tokenizer_dir))
    out = tmp_path / "tokens.jsonl"
    with pytest.raises(TokenDriftError, match="episode g0-2 turn 1") as e:
        export_run(drifted, out, ExportOptions(format="tokens"), renderer)
    assert "--mark-drift" in str(e.value) and not out.exists()
    report = export_run(drifted, out, ExportOptions(format="tokens", drift="mark"), renderer)
    rows = {r["episode_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert report.n_rows == 10 and len(report.drifts) == 1
    assert rows["g0-2"]["token_drift"].startswith("episode g0-2 turn 1: ")
    assert all(r["token_drift"] is None for eid, r in rows.items() if eid != "g0-2")


def test_other_models_need_their_tokenizer(run: RunDir, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--tokenizer DIR"):
        renderer_for(run, None)
    with pytest.raises(ConfigError, match="cannot load a tokenizer"):
        renderer_for(run, str(tmp_path / "missing"))


# --- the embedded model: a real run checks clean, and its planted drift is named --------------


async def test_a_real_smollm2_run_checks_clean_and_names_a_planted_drift(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="the embedded model needs the extra envlab[local]")
    from envlab.agents.model_agents import smollm2
    from envlab.core import Limits
    from envlab.envs.calc import CalcEnv
    from envlab.rollout import EpisodeConfig, rollout

    factory = smollm2(temperature=0.0, max_tokens=32, max_time_s=1e9, max_turns=2)
    untimed = EpisodeConfig(overrides=Limits.overrides(step_timeout_s=1e9, episode_timeout_s=1e9))
    spec = CalcEnv()
    try:
        await rollout(spec, factory, spec.tasks(n=2), out_dir=tmp_path / "r", config=untimed)
    finally:
        await factory.aclose()
    run = RunDir(tmp_path / "r")
    renderer = renderer_for(run, None)  # the run's agent is the embedded model
    report = check_run(run, renderer)
    assert report.n_checked >= 1 and report.drifts == [], [d.describe() for d in report.drifts]
    # the engine's view of the system prompt, without what the harness added: turn 0 drifts
    trajs = list(run.trajectories())
    victim = next(t for t in trajs if t.tokens is not None)
    msgs = [{"role": "system", "content": spec.new_episode().system_prompt()}, *victim.messages[1:]]
    planted = [dataclasses.replace(t, messages=msgs) if t is victim else t for t in trajs]
    bad = RunDir(write_run(tmp_path / "bad", planted))
    (drift,) = check_run(bad, renderer).drifts
    assert (drift.episode_id, drift.turn) == (victim.episode_id, 0)
