"""A universal forging agent (``attacks/universal_forger.sh``) against clean task folders, in
every mode a task folder grades in: the host filesystem, an image graded ``separate`` (the
default) and an image graded ``shared``. Every class of attack that reached reward 1.0 on the
image mode of issue 23 is one parametrised case, and the whole script is one more; each must
score 0 (a reward of 0 or ``GraderFailed``, both scored) and never be an ``InfraError``, while
the oracle scores 1.0 on the same task in the same mode.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from envlab.core import Action, ToolCall
from envlab.core.errors import GraderFailed, GraderTainted, InfraError
from envlab.envs.taskfolder.spec import TerminalEnv
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host, write_task

image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host

FORGER = Path(__file__).parent / "attacks" / "universal_forger.sh"
CLASSES = (
    "early_reward", "loader", "pytest_config", "pytest_plugin", "pytest_edit", "stdlib_edit",
    "fake_dist", "wheel_cache", "workspace", "uv_project", "path_programs", "shells",
)  # fmt: skip
MODES = ("host", "separate", "shared")

DOCKERFILE = (
    "FROM envlab-test/tiny:1\nWORKDIR /app\n"
    "RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py\n"
)
SOLVE = "printf 'def add(a, b):\\n    return a + b\\n' > /app/calc.py\necho done > /app/done\n"
# the tests import the agent's module (as most tests do), in a python of the image
CHECK_PY = (
    "import json, subprocess, sys\n"
    "sys.path.insert(0, '/app')\n"
    "import calc\n"
    "ok = calc.add(2, 3) == 5 and open('/app/done').read().strip() == 'done'\n"
    "print(json.dumps({'ok': ok}))\n"
    "sys.exit(0 if ok else 1)\n"
)
TEST_SH = (
    "cd /app\n"
    "if python3 /tests/check.py; then\n"
    "  echo 1 > /logs/verifier/reward.txt\n"
    "else\n"
    "  echo 0 > /logs/verifier/reward.txt\n"
    "fi\n"
)


def clean_task(root: Path, mode: str) -> Path:
    task = write_task(
        root, f"clean-{mode}", DOCKERFILE, test_sh=TEST_SH, solve_sh=SOLVE,
        tests={"tests/check.py": CHECK_PY},
    )  # fmt: skip
    if mode == "shared":
        text = (task / "task.toml").read_text()
        (task / "task.toml").write_text(
            text.replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n')
        )
    return task


def _call(command: str, n: int) -> Action:
    return Action(tool_calls=[ToolCall("run", {"command": command, "timeout_sec": 110}, f"c{n}")])


async def _episode(path: Path, mode: str, *, oracle: bool = False, script: str = "") -> Any:
    spec = TerminalEnv(path, images="off" if mode == "host" else "auto")
    task = spec.tasks()[0]
    ep = spec.environment(spec)
    try:
        await asyncio.wait_for(ep.reset(task), 180)
        assert ep.state()["sandbox_mode"] == ("host" if mode == "host" else "image")
        actions = [_call(script, 0)] if script else []
        actions += (
            ep.oracle_actions(task)
            if oracle
            else [Action(tool_calls=[ToolCall("submit", {}, "s")])]
        )
        for action in actions:
            await asyncio.wait_for(ep.step(action), 180)
        try:
            return await asyncio.wait_for(ep.grade(), 180)
        except Exception as e:  # the outcome under test: GraderFailed scores 0
            return e
    finally:
        await ep.close()


def forge_script(*classes: str) -> str:
    return f"bash -s {' '.join(classes)} <<'ENVLAB_FORGER'\n{FORGER.read_text()}\nENVLAB_FORGER"


def assert_scored_0(grade: Any) -> None:
    assert not isinstance(grade, InfraError), f"the agent's failure became not counted: {grade!r}"
    if isinstance(grade, Exception):
        assert isinstance(grade, GraderFailed), repr(grade)
        return
    assert grade.total == 0.0, f"forged reward {grade.total} stood: {grade.details}"


@pytest.fixture(params=MODES)
def task(request: pytest.FixtureRequest, tiny_base: str, tmp_path: Path) -> tuple[Path, str]:
    return clean_task(tmp_path, request.param), request.param


def test_the_oracle_scores_1_in_every_mode(task: tuple[Path, str]) -> None:
    path, mode = task
    grade = asyncio.run(_episode(path, mode, oracle=True))
    assert not isinstance(grade, Exception), grade
    assert grade.total == 1.0, grade.details


@pytest.mark.parametrize("attack", CLASSES)
def test_each_class_of_attack_scores_0(task: tuple[Path, str], attack: str) -> None:
    path, mode = task
    assert_scored_0(asyncio.run(_episode(path, mode, script=forge_script(attack))))


def test_the_universal_forger_scores_0(task: tuple[Path, str]) -> None:
    path, mode = task
    assert_scored_0(asyncio.run(_episode(path, mode, script=forge_script())))


def test_the_forger_solving_the_task_too_still_scores_what_the_solution_earns(
    tiny_base: str, tmp_path: Path
) -> None:
    """Control: the attacks are not what makes a grade 0 in the separate mode. An agent that
    solves the task and plants every attack outside its workspace still scores 1."""
    path = clean_task(tmp_path, "separate")
    outside = [c for c in CLASSES if c not in ("workspace", "uv_project")]
    script = SOLVE + forge_script(*outside)
    grade = asyncio.run(_episode(path, "separate", script=script))
    assert not isinstance(grade, Exception), grade
    assert grade.total == 1.0, grade.details


def test_a_shared_grade_that_loads_an_edited_stdlib_module_is_tainted(
    tiny_base: str, tmp_path: Path
) -> None:
    """The tamper evidence names the file: the agent's edited ``json`` ran in the tests."""
    path = clean_task(tmp_path, "shared")
    grade = asyncio.run(_episode(path, "shared", script=forge_script("stdlib_edit")))
    assert isinstance(grade, GraderTainted), repr(grade)
    assert any(f.endswith("json/__init__.py") for f in grade.details["grader_tainted"])


def test_task_check_says_to_declare_shared_when_the_tests_need_system_state(
    tiny_base: str, tmp_path: Path
) -> None:
    """The oracle writes outside the workspace and the tests read it there: graded separate it
    fails (nothing outside the workspace is carried); graded shared it passes; ``task check``
    says which mode graded and to declare ``shared``."""
    from envlab.cli.task_runs import check

    task = write_task(
        tmp_path / "tasks", "sysconf", "FROM envlab-test/tiny:1\nWORKDIR /app\n",
        solve_sh="mkdir -p /etc/app && echo on > /etc/app/mode\n",
        test_sh="if grep -q on /etc/app/mode; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n",
    )  # fmt: skip
    os.environ["ENVLAB_IMAGES"], old = "auto", os.environ.get("ENVLAB_IMAGES", "off")
    try:
        (row,) = asyncio.run(check(task.parent, runs=1, noop_runs=1, concurrency=1))
    finally:
        os.environ["ENVLAB_IMAGES"] = old
    assert not row.ok
    assert "verifier mode: separate" in row.notes
    assert any('environment_mode = "shared"' in p for p in row.problems), row.problems


def test_a_live_process_cannot_reach_the_shared_verifiers_reward(
    tiny_base: str, tmp_path: Path
) -> None:
    """The agent's processes live on while a shared task is graded: one writes 1 into every
    process's /proc/PID/root/logs/verifier/reward.txt, the verifier's view of its logs, while
    test.sh (which wrote 0) waits. The verifier's processes hold a capability the agent's lack:
    the kernel refuses them that view."""
    path = write_task(
        tmp_path, "race", "FROM envlab-test/tiny:1\nWORKDIR /app\n",
        test_sh="echo 0 > /logs/verifier/reward.txt\nsleep 2\n", solve_sh="true\n",
        toml='[verifier.extra]\n',
    )  # fmt: skip
    toml = (path / "task.toml").read_text().replace("[verifier.extra]\n", "")
    (path / "task.toml").write_text(
        toml.replace("[verifier]\n", '[verifier]\nenvironment_mode = "shared"\n')
    )
    race = (
        "nohup setsid bash -c 'while :; do for p in /proc/[0-9]*; do "
        'echo 1 > "$p/root/logs/verifier/reward.txt"; done 2>/dev/null; done\' '
        ">/dev/null 2>&1 &\necho started"
    )
    grade = asyncio.run(_episode(path, "shared", script=race))
    assert_scored_0(grade)
    assert not isinstance(grade, Exception), grade  # a valid 0: test.sh's own reward


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_served_the_forger_scores_0_and_an_honest_solver_1(
    tiny_base: str, tmp_path: Path, mode: str
) -> None:
    """The grade made by envlab's server (OpenEnv's wire, a real uvicorn on 127.0.0.1): the
    client's agent forges through the served tools and scores 0; a solver scores 1."""
    pytest.importorskip("uvicorn")
    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.rollout import PlannedEpisode, episode_ids, run_episodes
    from envlab.serve.server import ServerThread

    path = clean_task(tmp_path / "tasks", mode)
    forger, solver = tmp_path / "forger.sh", tmp_path / "solver.sh"
    forger.write_text(FORGER.read_text())
    solver.write_text("#!/bin/bash\n" + SOLVE)
    os.environ["ENVLAB_IMAGES"], old = "auto", os.environ.get("ENVLAB_IMAGES", "off")
    try:
        with ServerThread(TerminalEnv(path, images="auto")) as srv:
            spec = load_env(f"ws://{srv.host}:{srv.port}")
            task = spec.tasks()[0]
            agents = [load_agent(f"shell:{forger}"), load_agent(f"shell:{solver}")]
            plan = [
                PlannedEpisode(task, 0, episode_ids(spec.name, spec.seed_hash(), task.id, i, 0), a)
                for i, a in enumerate(agents)
            ]
            forged, solved = asyncio.run(run_episodes(spec, plan, concurrency=1))
    finally:
        os.environ["ENVLAB_IMAGES"] = old
    assert forged.status.value == "ok" and forged.reward == 0.0, (forged.status, forged.reward)
    assert solved.status.value == "ok" and solved.reward == 1.0, (solved.status, solved.error)
