"""Attacks on the grade from inside the verifier, on the graded state, and on being scored at all.

Each test runs a real scripted agent (``ShellScriptAgent``, what ``--agent shell:SCRIPT`` loads)
in a real bubblewrap sandbox, then the real verifier. None of the agents solves its task; each
must end with reward 0, or ``grader_failed`` (reward 0, status ok): never a reward for a
non-solution, never ``infra_error`` (excluded from the score). The scripts are in ``attacks/``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlab.agents.shell import ShellScriptAgent
from envlab.core import Status, Trajectory
from tests.conftest import subprocess_env
from tests.envs.taskfolder.conftest import EXAMPLES, episode, make_task, write
from tests.envs.taskfolder.test_grading_escapes import PLANT
from tests.sandbox.conftest import requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning"),
]

ATTACKS = Path(__file__).parent / "attacks"
ENVLAB = [sys.executable, "-m", "envlab.cli.main"]
FAST = ["--json", "--max-retries", "0", "-c", "5"]


def script(tmp_path: Path, name: str, prefix: str = "") -> ShellScriptAgent:
    """The attack script ``attacks/name``, with shell ``prefix`` lines (its parameters)."""
    path = tmp_path / name
    path.write_text(prefix + (ATTACKS / name).read_text())
    return ShellScriptAgent(path)


def inline(tmp_path: Path, text: str) -> ShellScriptAgent:
    path = tmp_path / "agent.sh"
    write(path, text)
    return ShellScriptAgent(path)


def tool_output(traj: Trajectory) -> str:
    return next(str(m["content"]) for m in traj.messages if m.get("role") == "tool")


def example(tmp_path: Path, name: str, verifier_timeout: float = 8.0) -> Path:
    """A copy of ``examples/tasks/name`` whose verifier times out sooner (attacks that hang)."""
    dst = tmp_path / "tasks" / name
    shutil.copytree(EXAMPLES / name, dst)
    toml = dst / "task.toml"
    text, n = re.subn(
        r"(\[verifier\][^\[]*?timeout_sec\s*=\s*)[0-9.]+",
        rf"\g<1>{verifier_timeout}",
        toml.read_text(),
    )
    assert n == 1, f"{toml}: no [verifier] timeout_sec to shorten"
    toml.write_text(text)
    return dst


def assert_no_reward(traj: Trajectory, what: str) -> None:
    """Scored, and scored 0: a plain 0 or ``grader_failed``; never excluded, never a pass."""
    assert traj.status is not Status.INFRA_ERROR, f"{what}: excluded as infra_error: {traj.error}"
    assert traj.status is Status.OK, f"{what}: {traj.status}: {traj.error}"
    assert traj.reward == 0.0, f"{what}: scored {traj.reward} ({traj.grader_failed=})"


# --- 2. agent code executing inside the verifier -----------------------------------------------
@pytest.mark.parametrize("task", ["fix-bug-pytest", "textstats-pytest"])
async def test_module_under_test_writes_the_reward_then_kills_the_verifier(
    tmp_path: Path, task: str
) -> None:
    traj = await episode(EXAMPLES / task, script(tmp_path, "kill_after_reward.sh"))
    assert "planted" in tool_output(traj), tool_output(traj)
    assert_no_reward(traj, f"{task}: reward written by the module under test, then kill -9 -1")


@pytest.mark.parametrize("task", ["fix-bug-pytest", "textstats-pytest"])
async def test_module_under_test_exits_the_test_runner_at_import(tmp_path: Path, task: str) -> None:
    traj = await episode(EXAMPLES / task, script(tmp_path, "exit_at_import.sh"))
    assert "planted" in tool_output(traj), tool_output(traj)
    assert_no_reward(traj, f"{task}: os._exit(0) at import")


MODULE = {"fix-bug-pytest": "intervals.py", "textstats-pytest": "textstats.py"}


@pytest.mark.parametrize(
    ("payload", "task"),
    [
        ("atexit_exit0", "fix-bug-pytest"),
        ("atexit_forge_junit", "textstats-pytest"),
        ("patch_runtest", "fix-bug-pytest"),
        ("patch_runtest", "textstats-pytest"),
        ("forge_session_finish", "fix-bug-pytest"),
        ("erase_session_start", "fix-bug-pytest"),
        ("extra_reward_txt", "textstats-pytest"),
        ("extra_rewards_json", "textstats-pytest"),
    ],
)
async def test_module_under_test_tampers_with_the_test_runner(
    tmp_path: Path, payload: str, task: str
) -> None:
    """The module under test keeps its (wrong) code and adds ``attacks/module_payloads/``."""
    code = (ATTACKS / "module_payloads" / f"{payload}.py").read_text()
    agent = inline(tmp_path, f"cat >> /app/{MODULE[task]} <<'PY'\n{code}PY\necho planted\n")
    traj = await episode(EXAMPLES / task, agent)
    assert "planted" in tool_output(traj), tool_output(traj)
    assert_no_reward(traj, f"{task}: {payload} in the module under test")


@pytest.mark.parametrize("mode", ["timestamp", "hash", "sourceless"])
async def test_forged_bytecode_beside_the_source_is_not_imported(tmp_path: Path, mode: str) -> None:
    traj = await episode(
        EXAMPLES / "fix-bug-pytest", script(tmp_path, "forge_pyc.sh", f"MODE={mode}\n")
    )
    out = tool_output(traj)
    assert "FORGED-MERGE [(1, 3)]" in out, f"control: the forged bytecode is importable\n{out}"
    assert_no_reward(traj, f"fix-bug-pytest with {mode} bytecode of a correct merge()")


async def test_the_module_under_test_cannot_rewrite_test_sh(tmp_path: Path) -> None:
    traj = await episode(EXAMPLES / "fix-bug-pytest", script(tmp_path, "rewrite_test_sh.sh"))
    assert "planted" in tool_output(traj)
    assert_no_reward(traj, "/tests/test.sh rewritten while bash runs it")


async def test_tests_are_read_only_to_code_the_verifier_runs(tmp_path: Path) -> None:
    """The grader runs the agent's program and compares its output with /tests/expected.txt;
    the program writes its own expected output first."""
    path = make_task(
        tmp_path,
        test_sh=(
            "python3 /app/answer.py > /tmp/out.txt 2>/dev/null\n"
            "if cmp -s /tmp/out.txt /tests/expected.txt; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        ),
        tests={"expected.txt": "42\n"},
    )
    agent = inline(
        tmp_path,
        """
        cat > /app/answer.py <<'PY'
        import os
        for name in ("/tests/expected.txt", "/tests/test.sh"):
            try:
                os.chmod(name, 0o777)
            except OSError:
                pass
        try:
            open("/tests/expected.txt", "w").write("forged\\n")
        except OSError:
            pass
        print("forged")
        PY
        echo written
        """,
    )
    traj = await episode(path, agent)
    assert "written" in tool_output(traj)
    assert_no_reward(traj, "the program overwrote /tests/expected.txt")


@pytest.mark.parametrize(
    "command",
    [
        "python3.11 -m pytest -q /tests/test_x.py",
        "/usr/bin/python3 -m pytest -q /tests/test_x.py",
        "/usr/bin/python3.11 -m pytest -q /tests/test_x.py",
        "/usr/bin/env python3.11 -m pytest -q /tests/test_x.py",
        "$(command -v python3.11) -c 'import pytest, sys; sys.exit(pytest.main([\"/tests\"]))'",
    ],
)
async def test_any_python_the_verifier_runs_ignores_modules_planted_in_app(
    tmp_path: Path, command: str
) -> None:
    test_sh = (
        f"cd /app && {command} && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    path = make_task(
        tmp_path,
        test_sh=test_sh,
        tests={
            "test_x.py": "def test_answer():\n    assert open('/app/answer.txt').read() == '42'\n"
        },
    )
    traj = await episode(path, ShellScriptAgent(_plant(tmp_path)))
    assert "planted" in tool_output(traj)
    assert_no_reward(traj, f"planted /app/pytest.py imported through {command!r}")


TEST_X = "def test_answer():\n    assert open('/app/answer.txt').read() == '42'\n"


def _plant(tmp_path: Path) -> Path:
    path = tmp_path / "plant.sh"
    write(path, PLANT)
    return path


GIT_GRADER = """
cd /app
git status --porcelain > /tmp/status.txt 2>&1
git diff > /tmp/diff.txt 2>&1
if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi \\
  > /logs/verifier/reward.txt
"""


@pytest.mark.parametrize("twist", ["plain", "worktree", "symlink"])
@pytest.mark.parametrize("vector", ["fsmonitor", "filter", "external", "textconv"])
async def test_git_in_the_verifier_runs_no_program_of_the_repository(
    tmp_path: Path, vector: str, twist: str
) -> None:
    path = make_task(tmp_path, test_sh=GIT_GRADER)
    params = f"VECTOR={vector}\nTWIST={twist}\nexport VECTOR TWIST\n"
    traj = await episode(path, script(tmp_path, "git_config_programs.sh", params))
    out = tool_output(traj)
    assert "CONTROL-42" in out, f"control: git runs the {vector} program in the agent's box\n{out}"
    assert_no_reward(traj, f"git ran the repository's {vector} program ({twist=}) in the verifier")


# --- 3. answers that are links into /tests -----------------------------------------------------
LINKS = {
    "absolute": "ln -s /tests/expected.json /app/answer.json",
    "relative": "ln -s ../tests/expected.json /app/answer.json",
    "via-a-linked-dir": "ln -s /tests /app/t && ln -s t/expected.json /app/answer.json",
    "dir-link": "mkdir -p /app/out && ln -s /tests /app/out/t && ln -s out/t/expected.json "
    "/app/answer.json",
}


def expected_answer_task(tmp_path: Path) -> Path:
    return make_task(
        tmp_path,
        test_sh=(
            "if cmp -s /app/answer.json /tests/expected.json; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        ),
        tests={"expected.json": '{"total": 1234}\n'},
    )


@pytest.mark.parametrize("how", sorted(LINKS))
async def test_an_answer_linked_into_tests_scores_zero(tmp_path: Path, how: str) -> None:
    agent = inline(
        tmp_path,
        LINKS[how] + "\n[ -e /app/answer.json ] || echo DANGLING-HERE\nls -la /app\n",
    )
    traj = await episode(expected_answer_task(tmp_path), agent)
    assert "DANGLING-HERE" in tool_output(traj), "the link dangles in the agent's sandbox"
    assert_no_reward(traj, f"answer.json linked into /tests ({how})")


async def test_the_trajectory_records_what_was_not_carried_into_the_verifier(
    tmp_path: Path,
) -> None:
    agent = inline(tmp_path, LINKS["absolute"] + "\nmkfifo /app/agent-fifo\n")
    traj = await episode(expected_answer_task(tmp_path), agent)
    assert_no_reward(traj, "answer.json linked into /tests")
    info = json.dumps(traj.info, default=str)
    assert "answer.json" in info and "agent-fifo" in info, (
        f"traj.info does not name the entries left out of the verifier's copy: {info[:2000]}"
    )


# --- 4. escaping the score ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("task", "attack"),
    [
        ("log-errors", "ln -sf /dev/zero /app/answer.txt"),
        ("log-errors", "ln -sf /proc/self/fd/1 /app/answer.txt"),
        ("log-errors", "mkfifo /app/answer.txt"),
        ("sqlite-report", "ln -sf /proc/self/fd/1 /app/answer.txt"),
        ("sqlite-report", "ln -sf /dev/zero /app/answer.txt"),
        ("env-settings", "cd / && rm -rf /app/project"),
        ("env-settings", "cd / && rm -rf /app/project && echo x > /app/project"),
        (
            "json-transform",
            "python3 -c \"print('[' * 200000 + ']' * 200000)\" > active_emails.json",
        ),
        ("json-transform", "mkfifo /app/active_emails.json"),
    ],
    ids=[
        "dev-zero",
        "own-stdout",
        "fifo",
        "sqlite-own-stdout",
        "sqlite-dev-zero",
        "workdir-deleted",
        "workdir-a-file",
        "deep-json",
        "json-fifo",
    ],
)
async def test_an_answer_that_breaks_the_verifier_is_scored(
    tmp_path: Path, task: str, attack: str
) -> None:
    agent = inline(tmp_path, attack + "\necho attacked\n")
    traj = await episode(example(tmp_path, task), agent)
    assert "attacked" in tool_output(traj), tool_output(traj)
    assert_no_reward(traj, f"{task}: {attack}")


HANGS = {
    "hangs-at-import": "import time\ntime.sleep(10**6)\n",
    "daemon-holds-output": (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(10**6)\n"
        "    os._exit(0)\n"
        "raise ImportError('no merge here')\n"
    ),
    "forks-then-hangs": (
        "import os, time\n"
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "time.sleep(10**6)\n"
    ),
}


@pytest.mark.parametrize("how", sorted(HANGS))
async def test_a_module_that_hangs_the_verifier_is_scored(tmp_path: Path, how: str) -> None:
    agent = inline(tmp_path, f"cat > /app/intervals.py <<'PY'\n{HANGS[how]}PY\necho planted\n")
    traj = await episode(example(tmp_path, "fix-bug-pytest", 4.0), agent)
    assert "planted" in tool_output(traj)
    assert_no_reward(traj, f"fix-bug-pytest: the module under test {how}")


# --- 4b. the mixed agent: solving what it can and breaking the grader elsewhere ----------------
def envlab_eval(tasks: Path, agent: Path, out: Path) -> dict[str, object]:
    r = subprocess.run(
        [*ENVLAB, "eval", str(tasks), "--agent", f"shell:{agent}", "--out", str(out), *FAST],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


async def test_breaking_the_grader_where_it_cannot_solve_gains_the_agent_nothing(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks"
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "task.toml").is_file()):
        example(tmp_path, folder.name, 10.0)
    honest = tmp_path / "honest.sh"
    honest.write_text((ATTACKS / "solve_some.sh").read_text())
    mixed = tmp_path / "mixed.sh"
    mixed.write_text(honest.read_text() + (ATTACKS / "break_grader.sh").read_text())

    h = envlab_eval(tasks, honest, tmp_path / "run-honest")
    m = envlab_eval(tasks, mixed, tmp_path / "run-mixed")
    n = len(list(tasks.iterdir()))
    assert h["n_scored"] == n and h["n_excluded"] == 0, h["status_counts"]
    assert h["pass_rate"] == pytest.approx(3 / n), "control: the honest part solves 3 tasks"
    rates = f"pass rate {m['pass_rate']} mixed vs {h['pass_rate']} honest"
    assert m["n_excluded"] == 0, f"the mixed agent escaped being scored ({rates}): {m}"
    assert m["n_scored"] == n
    assert m["pass_rate"] == h["pass_rate"], (m["pass_rate"], h["pass_rate"])
    assert m["mean_reward"] == h["mean_reward"]
