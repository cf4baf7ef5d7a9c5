"""``envlab task run|check`` as a user runs them (a child process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from envlab.cli.task_runs import check
from envlab.core import Trajectory
from envlab.rollout import watch
from tests.conftest import subprocess_env
from tests.envs.taskfolder.conftest import EXAMPLES, make_task
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap
TASK = [sys.executable, "-m", "envlab.cli.task"]


def task_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TASK, *args], capture_output=True, text=True, env=subprocess_env(), timeout=180
    )


def test_run_prints_reward_and_status_per_sample(tmp_path: Path) -> None:
    script = tmp_path / "solve.sh"
    script.write_text("printf 'Hello, world!\\n' > /app/hello.txt\n")
    r = task_cli("run", str(EXAMPLES / "hello-file"), "--agent", f"shell:{script}", "-k", "2",
                 "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["sample"], x["status"], x["reward"]) for x in rows] == [
        (0, "ok", 1.0),
        (1, "ok", 1.0),
    ]
    table = task_cli("run", str(EXAMPLES / "hello-file"), "--agent", "noop")
    assert table.returncode == 0 and "hello-file" in table.stdout and "ok" in table.stdout


def test_check_passes_a_good_task_and_fails_a_broken_one(tmp_path: Path) -> None:
    good = task_cli("check", str(EXAMPLES / "log-errors"), "--runs", "2", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)[0]["ok"] is True
    broken = make_task(tmp_path, "always-one", solve_sh="true\n")  # noop scores 1: broken
    bad = task_cli("check", str(broken), "--runs", "1")
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "noop sample 0" in bad.stdout
    missing = task_cli("check", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


async def test_check_runs_every_episode_through_the_one_driver() -> None:
    seen: list[Trajectory] = []
    with watch(seen.append):
        [row] = await check(EXAMPLES / "hello-file", runs=2, noop_runs=1, concurrency=2)
    assert row.ok, row.problems
    assert sorted(t.agent.name for t in seen) == ["noop", "oracle", "oracle"]


def test_check_refuses_a_sandbox_it_does_not_know() -> None:
    r = task_cli("check", str(EXAMPLES / "hello-file"), "--sandbox", "docker")
    assert r.returncode == 2 and "--sandbox must be one of bwrap, local" in r.stderr


async def test_check_says_a_failure_of_every_run_once_with_its_cause() -> None:
    """Five oracle runs failing the same way were five rows cut before the cause."""
    from envlab.cli.task_runs import EpisodeRow, _check_row
    from envlab.envs.taskfolder.model import load_task_folder

    folder = load_task_folder(EXAMPLES / "hello-file")
    why = "the verifier wrote no reward (exit 127). Output tail:\n+ pytest\npytest: not found\n"
    oracle = [
        EpisodeRow(task_id=folder.name, sample=i, agent="oracle", status="ok", reward=0.0,
                   duration_s=1.0, attempts=1, grader_failed=why)
        for i in range(5)
    ]  # fmt: skip
    row = await _check_row(folder, oracle, [])
    [problem] = row.problems
    assert problem.startswith("oracle samples 0, 1, 2, 3, 4: ok, reward 0.0")
    assert problem.endswith("pytest: not found)")
