"""``envlab train``: SIGKILL a real run mid-way, ``--resume`` it: no learner step lost or done
twice, no sample learned twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from envlab.runs import TrajectoryStore
from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]
pytest.importorskip("torch")


def _args(out: Path, steps: int) -> list[str]:
    return [
        "train", "tests.support.bandit:BanditEnv",
        "--learner", "tests.support.bandit:TableLearner", "--learner-arg", "delay=0.04",
        "-e", "delay=0.01", "--steps", str(steps), "--groups-per-step", "2",
        "--group-size", "4", "--checkpoint-every", "3", "--eval-tasks", "0",
        "--out", str(out), "--no-progress",
    ]  # fmt: skip


def test_sigkill_then_resume_loses_and_repeats_no_learner_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*ENVLAB, *_args(out, 30)], env=subprocess_env(), start_new_session=True
    )
    ckpt = out / "checkpoints" / "step-000009.pt"
    deadline = time.time() + 200  # a guard against a hang, not a speed bound
    while time.time() < deadline and not ckpt.exists() and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.1)  # past the checkpoint, mid-way to the next
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the kill must land mid-run"
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert 9 <= len(lines) < 30

    done = subprocess.run(
        [*ENVLAB, *_args(out, 30), "--resume", "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["train"]["steps"] == 30 and "resumed from" in payload["notes"][0]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 31))
    trajs = TrajectoryStore(out / "trajectories.jsonl").load(every_record=True)
    assert len({t.episode_id for t in trajs}) == len(trajs)
    learned = Counter(t.info["learner_step"] for t in trajs if "learner_step" in t.info)
    assert learned == {s: 8 for s in range(1, 31)}  # 2 groups x 4 samples, every step, once
    groups = Counter(t.info["train_group"] for t in trajs if "learner_step" in t.info)
    assert set(groups.values()) == {4}


def test_train_refuses_an_unknown_learner_and_resume_without_out(tmp_path: Path) -> None:
    bad = subprocess.run(
        [*ENVLAB, "train", "tests.support.bandit:BanditEnv", "--learner", "nope",
         "--out", str(tmp_path / "x")],
        env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown learner 'nope'" in bad.stderr
    bad = subprocess.run(
        [*ENVLAB, "train", "tests.support.bandit:BanditEnv", "--resume"],
        env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "--out" in bad.stderr


def test_train_triage_then_heldout_against_random_and_the_optimum(tmp_path: Path) -> None:
    """A short real run: the held-out runs exist, paired on the same tasks, the optimum is
    the exact best (the oracle's realized mean), and the report shows the comparison."""
    out = tmp_path / "run"
    done = subprocess.run(
        [*ENVLAB, "train", "triage", "--steps", "20", "--groups-per-step", "8",
         "--eval-tasks", "150", "--out", str(out), "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    h = json.loads(done.stdout)["heldout"]
    rows = {r["name"]: r for r in h["rows"]}
    assert set(rows) == {"trained", "random", "optimum"}
    assert rows["optimum"]["fraction_of_best"] == 1.0 and rows["random"]["gap_closed"] == 0.0
    assert all(r["n_tasks"] == 150 and r["n_excluded"] == 0 for r in rows.values())
    assert rows["trained"]["mean"] > rows["random"]["mean"]  # 20 steps already beat chance
    ids = [
        {t.task_id for t in TrajectoryStore(out / "eval" / n / "trajectories.jsonl").load()}
        for n in rows
    ]
    assert ids[0] == ids[1] == ids[2]
    cmp = subprocess.run(
        [*ENVLAB, "compare", str(out / "eval" / "random"), str(out / "eval" / "trained"),
         "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cmp.returncode == 0, cmp.stderr
    assert json.loads(cmp.stdout)["n_shared"] == 150
    page = tmp_path / "r.html"
    rep = subprocess.run(
        [*ENVLAB, "report", str(out), "--out", str(page)],
        env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    assert "gap closed" in page.read_text() and "data:image/png;base64," in page.read_text()


def test_train_takes_the_limit_options_and_checkpoints_by_time(tmp_path: Path) -> None:
    """``--episode-timeout`` (and the other limit options, as in ``eval``) reaches every
    training episode: each step of the bandit sleeps 50 ms (``-e delay=0.05``), so with 1 ms
    every episode times out (the agent's failure: graded on what it did). ``--checkpoint-every-s``
    checkpoints after a step that ends that long after the last."""
    out = tmp_path / "run"
    args = _args(out, 3)
    args[args.index("--checkpoint-every") + 1] = "100"
    args[args.index("delay=0.01")] = "delay=0.05"  # past the 1 ms limit and the 10 ms tick
    run = subprocess.run(
        [*ENVLAB, *args, "--episode-timeout", "0.001", "--checkpoint-every-s", "0.001"],
        env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    trajs = TrajectoryStore(out / "trajectories.jsonl").load()
    assert trajs and {t.status.value for t in trajs} == {"timeout"}
    assert all(t.scored for t in trajs)  # the agent's failure is graded, never excluded
    saved = sorted(p.name for p in (out / "checkpoints").glob("step-*.pt"))
    assert saved == ["step-000002.pt", "step-000003.pt"]  # the last two kept; 2 by time alone
