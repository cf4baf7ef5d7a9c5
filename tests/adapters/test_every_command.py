"""Each adapter's environments run through every command: served by ``envlab serve`` (a real
server on 127.0.0.1) and played remotely with the same rewards as locally, and trained by
``envlab train``. (``eval``, ``vet`` and ``arena`` are in each adapter's own tests.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envlab.core import Action, Status
from envlab.envs import load_env
from tests.conftest import subprocess_env
from tests.support.envs import ScriptAgent
from tests.support.play import play

pytest.importorskip("fastapi")
CASES = {
    "rg:leg_counting": "reasoning_gym",
    "gym:FrozenLake-v1": "gymnasium",
    "ta:TicTacToe-v0": "textarena",
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_served_episodes_grade_as_local_ones(name: str) -> None:
    pytest.importorskip(CASES[name])
    from envlab.serve.server import ServerThread

    local = load_env(name)
    task = local.tasks(n=1)[0]
    moves = [Action(text=t) for t in ("<answer>0</answer>", "[4]", "[0]", "[8]", "[2]")]
    here = await play(local, ScriptAgent(list(moves)), task)
    with ServerThread(load_env(name), max_sessions=2) as srv:
        remote = load_env(f"ws://{srv.host}:{srv.port}")
        [far] = [t for t in remote.tasks(n=1)]
        assert far.id == task.id and far.answer is None  # the answer stays on the server
        there = await play(remote, ScriptAgent(list(moves)), far)
    assert here.status is Status.OK and there.status is Status.OK, (here.error, there.error)
    assert there.reward == here.reward and there.n_steps == here.n_steps


@pytest.mark.parametrize("name", sorted(CASES))
def test_train_drives_the_environment(name: str, tmp_path: Path) -> None:
    pytest.importorskip(CASES[name])
    pytest.importorskip("torch")
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "envlab", "train", name, "--learner",
         "tests.support.bandit:TableLearner", "--steps", "2", "--groups-per-step", "2",
         "--group-size", "2", "--eval-tasks", "0", "--out", str(out), "--no-progress",
         "--json"],
        env=subprocess_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["train"]["steps"] == 2
