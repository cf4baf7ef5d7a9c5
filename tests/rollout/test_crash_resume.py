"""SIGKILL a real ``envlab eval`` mid-run, then ``--resume``: nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def test_sigkill_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "eval",
        "tests.support.envs:SlowArith",
        "--agent",
        "oracle",
        "--tasks",
        "40",
        "--samples",
        "4",
        "--concurrency",
        "4",
        "--out",
        str(out),
        "--env-arg",
        "delay=0.05",
        "--no-progress",
    ]
    proc = subprocess.Popen([*ENVLAB, *args], env=subprocess_env(), start_new_session=True)
    traj = out / "trajectories.jsonl"
    deadline = time.time() + 200  # a guard against a hang, not a speed bound
    while time.time() < deadline:
        if traj.exists() and len(traj.read_bytes().splitlines()) >= 30:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    before = len(traj.read_bytes().splitlines())
    assert 30 <= before < 160, "the kill must land mid-run"

    done = subprocess.run(
        [*ENVLAB, *args, "--resume", "--json"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in traj.read_text().splitlines()]
    ids = [r["episode_id"] for r in records]
    assert len(ids) == 160 and len(set(ids)) == 160
    assert {(r["task_id"], r["sample_index"]) for r in records} == {
        (f"arith-test-0-{i:05d}", s) for i in range(40) for s in range(4)
    }
    summary = json.loads(done.stdout)
    assert summary["n_episodes"] == 160 and summary["pass_at_k"]["1"] == 1.0
