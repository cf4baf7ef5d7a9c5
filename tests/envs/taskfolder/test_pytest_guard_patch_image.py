"""The pytest guard against code under test that patches pytest, in the image mode: the tiny
base with the host's pytest copied in (as ``test_separate_redteam`` does), graded ``separate``
and ``shared``; the guard is loaded by ``PYTEST_PLUGINS`` into the image's own Python. Every
variant of ``test_pytest_guard_patch`` scores 0 (``GraderTainted``, naming what was changed); the
honest solution still scores 1 and a wrong one a plain 0."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from envlab.core.errors import GraderTainted
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host
from tests.envs.taskfolder.test_pytest_guard_patch import (
    NEEDS_WRONG_FIXED,
    PATCHES,
    RIGHT,
    TEST_ADD,
    TEST_SH,
    WRONG,
)
from tests.envs.taskfolder.test_separate_redteam import DOCKERFILE, MODES, episode, task

image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host

HALF_RIGHT = "def add(a, b):\n    return a + b if (a, b) == (20, 30) else a - b\n"


def guarded_task(root: Path, mode: str) -> Path:
    """A task whose tests import the agent's ``/app/solution.py`` into the image's pytest."""
    docker = (
        DOCKERFILE
        + "COPY site/ /usr/lib/python3/dist-packages/\n"
        + "RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/solution.py\n"
    )
    solve = f"cat > /app/solution.py <<'PY'\n{RIGHT}PY\n"
    path = task(root, mode, docker=docker, test_sh=TEST_SH, solve_sh=solve,
                tests={"tests/test_add.py": TEST_ADD})  # fmt: skip
    site, dest = Path(pytest.__file__).parents[1], path / "environment" / "site"
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments"):
        shutil.copytree(site / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        for info in site.glob(f"{name}-*.dist-info"):
            shutil.copytree(info, dest / info.name)
    shutil.copy(site / "py.py", dest / "py.py")
    return path


def planting(module: str, code: str = "") -> str:
    return f"cat > /app/solution.py <<'PY'\n{module}{textwrap.dedent(code)}PY\n"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", sorted(PATCHES))
def test_a_module_that_patches_pytest_at_import_is_tainted_in_an_image(
    tiny_base: str, tmp_path: Path, variant: str, mode: str
) -> None:
    module = HALF_RIGHT if variant in NEEDS_WRONG_FIXED else WRONG
    grade = episode(guarded_task(tmp_path, mode), planting(module, PATCHES[variant]))
    assert isinstance(grade, GraderTainted), f"{variant} ({mode}): {grade!r}"
    assert grade.details["grader_tainted"][0].startswith("pytest: "), grade.details


@pytest.mark.parametrize("mode", MODES)
def test_an_honest_solution_scores_1_and_a_wrong_one_0_in_an_image(
    tiny_base: str, tmp_path: Path, mode: str
) -> None:
    path = guarded_task(tmp_path, mode)
    right = episode(path, oracle=True)
    assert not isinstance(right, Exception) and right.total == 1.0, repr(right)
    wrong = episode(path, planting(WRONG))
    assert not isinstance(wrong, Exception) and wrong.total == 0.0, repr(wrong)


@pytest.mark.parametrize("mode", MODES)
def test_served_a_patched_pytest_scores_0_and_an_honest_solution_1(
    tiny_base: str, tmp_path: Path, mode: str
) -> None:
    """The grade made by envlab's server (OpenEnv's wire, a real uvicorn on 127.0.0.1): the
    client's agent plants a module that patches pytest through the served tools; the server's
    guard taints the grade and the client reads a failed grade (0), never a pass."""
    import asyncio
    import os

    pytest.importorskip("uvicorn")
    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.envs.taskfolder import TerminalEnv
    from envlab.rollout import PlannedEpisode, episode_ids, run_episodes
    from envlab.serve.server import ServerThread

    path = guarded_task(tmp_path / "tasks", mode)
    patcher, solver = tmp_path / "patcher.sh", tmp_path / "solver.sh"
    patcher.write_text("#!/bin/bash\n" + planting(WRONG, PATCHES["function_runtest"]))
    solver.write_text("#!/bin/bash\n" + planting(RIGHT))
    os.environ["ENVLAB_IMAGES"], old = "auto", os.environ.get("ENVLAB_IMAGES", "off")
    try:
        with ServerThread(TerminalEnv(path, images="auto")) as srv:
            spec = load_env(f"ws://{srv.host}:{srv.port}")
            t = spec.tasks()[0]
            agents = [load_agent(f"shell:{patcher}"), load_agent(f"shell:{solver}")]
            plan = [
                PlannedEpisode(t, 0, episode_ids(spec.name, spec.seed_hash(), t.id, i, 0), a)
                for i, a in enumerate(agents)
            ]
            patched, solved = asyncio.run(run_episodes(spec, plan, concurrency=1))
    finally:
        os.environ["ENVLAB_IMAGES"] = old
    assert patched.status.value == "ok" and patched.reward == 0.0, (patched.status, patched.reward)
    assert patched.grader_failed is not None and "changed pytest" in patched.grader_failed
    assert solved.status.value == "ok" and solved.reward == 1.0, (solved.status, solved.error)
