"""Episodes in an image through ``TerminalEnv(images="auto")``: the oracle scores 1 and a noop
0, offline grading serves uv and pytest from the build-time caches, a fetch nothing can serve
is ``grader_failed``, compose sidecars are refused, and the agent cannot forge its grade."""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlab.core import Action, ToolCall
from envlab.core.errors import ConfigError, GraderFailed, InfraError
from envlab.envs.taskfolder.spec import TerminalEnv
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import (
    local_index,
    needs_image_host,
    write_task,
)

# the session's fixtures (a private ENVLAB_CACHE_DIR, the tiny base)
image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host

DOCKERFILE = "FROM envlab-test/tiny:1\nWORKDIR /app\nRUN echo start > /app/start\n"
SOLVE = "echo done > /app/done\n"
TEST_DONE = (
    "if [ -f /app/done ]; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


def _run(command: str, n: int = 0) -> Action:
    return Action(tool_calls=[ToolCall("run", {"command": command}, f"c{n}")])


async def _episode(
    path: Path, *, oracle: bool = False, commands: tuple[str, ...] = (), regrade: bool = False
) -> dict[str, Any]:
    """Reset, the oracle or the commands, submit, grade (twice with ``regrade``), close."""
    spec = TerminalEnv(path, images="auto")
    task = spec.tasks()[0]
    ep = spec.environment(spec)
    out: dict[str, Any] = {"outputs": []}
    try:
        await asyncio.wait_for(ep.reset(task), 120)
        out["state"] = ep.state()
        actions = [_run(c, i) for i, c in enumerate(commands)]
        # the oracle's actions end with its submit
        actions += (
            ep.oracle_actions(task)
            if oracle
            else [Action(tool_calls=[ToolCall("submit", {}, "s")])]
        )
        for action in actions:
            out["outputs"].append(str(await asyncio.wait_for(ep.step(action), 120)))
        grades = []
        for _ in range(2 if regrade else 1):
            try:
                grades.append(await asyncio.wait_for(ep.regrade(), 120))
            except GraderFailed as e:
                grades.append(e)
        out["grades"] = grades
    finally:
        await ep.close()
    return out


def episode(path: Path, **kw: Any) -> dict[str, Any]:
    return asyncio.run(_episode(path, **kw))


def score(out: dict[str, Any]) -> float:
    grade = out["grades"][0]
    assert not isinstance(grade, GraderFailed), f"grader failed: {grade}"
    return float(grade.total)


@pytest.fixture
def simple(tiny_base: str, tmp_path: Path) -> Path:
    return write_task(tmp_path, "simple", DOCKERFILE, test_sh=TEST_DONE, solve_sh=SOLVE)


def test_oracle_scores_1_and_noop_0_in_the_image(simple: Path) -> None:
    oracle = episode(simple, oracle=True)
    assert oracle["state"]["sandbox_mode"] == "image"
    assert score(oracle) == 1.0
    noop = episode(simple)
    assert noop["state"]["sandbox_mode"] == "image"
    assert score(noop) == 0.0


# --- offline grading with uv -----------------------------------------------------------------
UV_VERSION = importlib.metadata.version("uv")
UVX_TEST = (
    f"curl -LsSf https://astral.sh/uv/{UV_VERSION}/install.sh | sh\n"
    ". $HOME/.local/bin/env\n"
    "uvx pytest /tests/test_x.py && echo 1 > /logs/verifier/reward.txt "
    "|| echo 0 > /logs/verifier/reward.txt\n"
)


@pytest.fixture(scope="module")
def index_env() -> Iterator[str]:
    """The host's package index is a local one (as a mirror would be); restored afterwards."""
    names = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
    old = {n: os.environ.get(n) for n in names}
    with local_index() as url:
        os.environ.update({n: url for n in names})
        try:
            yield url
        finally:
            for n, v in old.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v


@pytest.fixture
def uvx_task(tiny_base: str, index_env: str, tmp_path: Path) -> Path:
    return write_task(
        tmp_path,
        "uvx",
        DOCKERFILE,
        test_sh=UVX_TEST,
        solve_sh=SOLVE,
        tests={"tests/test_x.py": "def test_done():\n    pass\n"},
        toml='network_mode = "no-network"\n',
    )


def test_offline_uvx_grading(uvx_task: Path) -> None:
    oracle = episode(uvx_task, oracle=True)
    assert score(oracle) == 1.0, oracle["grades"][0].details["verifier_output_tail"]
    assert score(episode(uvx_task)) == 0.0


def test_fake_uv_and_curl_planted_by_the_agent_do_not_grade(uvx_task: Path) -> None:
    plant = (
        "mkdir -p /root/.local/bin /usr/local/bin /app && "
        "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt; exit 0\\n' > /root/.local/bin/uvx"
        " && cp /root/.local/bin/uvx /root/.local/bin/uv && cp /root/.local/bin/uvx "
        "/usr/local/bin/curl && cp /root/.local/bin/uvx /usr/local/bin/uvx && "
        "chmod 755 /root/.local/bin/uv /root/.local/bin/uvx /usr/local/bin/curl /usr/local/bin/uvx"
    )
    assert score(episode(uvx_task, commands=(plant,))) == 0.0


def test_a_forged_offline_report_does_not_excuse_a_failing_grade(uvx_task: Path) -> None:
    forge = (
        "mkdir -p /opt/envlab/report && echo https://example.invalid/x > "
        "/opt/envlab/report/needs-network.txt"
    )
    out = episode(uvx_task, commands=(forge,))
    assert score(out) == 0.0


# --- what grading offline cannot serve -------------------------------------------------------
def test_a_fetch_nothing_can_serve_is_grader_failed(tiny_base: str, tmp_path: Path) -> None:
    test_sh = "curl -fsSL https://example.invalid/data.csv -o /tmp/d\n" + TEST_DONE
    task = write_task(tmp_path, "fetch", DOCKERFILE, test_sh=test_sh, solve_sh=SOLVE)
    out = episode(task, oracle=True, regrade=True)
    assert len(out["grades"]) == 2
    for grade in out["grades"]:
        assert isinstance(grade, GraderFailed)
        assert "https://example.invalid/data.csv" in str(grade)
        assert "needs the network" in str(grade)


# --- docker-compose --------------------------------------------------------------------------
def test_compose_sidecars_are_refused(tiny_base: str, tmp_path: Path) -> None:
    compose = "services:\n  main:\n    build: .\n  redis:\n    image: redis:7\n"
    task = write_task(
        tmp_path, "compose", DOCKERFILE, test_sh=TEST_DONE, solve_sh=SOLVE,
        files={"docker-compose.yaml": compose},
    )  # fmt: skip
    with pytest.raises(ConfigError) as e:
        episode(task)
    assert "redis" in str(e.value)


def test_a_single_service_compose_runs_with_a_note(tiny_base: str, tmp_path: Path) -> None:
    from envlab.envs.taskfolder.model import load_task_folder
    from envlab.sandbox.tasks.runtime import compose_notes

    compose = "services:\n  main:\n    build: .\n    tmpfs:\n      - /scratch\n"
    task = write_task(
        tmp_path, "compose1", DOCKERFILE, test_sh=TEST_DONE, solve_sh=SOLVE,
        files={"docker-compose.yaml": compose},
    )  # fmt: skip
    notes = compose_notes(load_task_folder(task))
    assert any("tmpfs" in n for n in notes)
    out = episode(task, oracle=True)
    assert out["state"]["sandbox_mode"] == "image"
    assert score(out) == 1.0


# --- attacks ---------------------------------------------------------------------------------
def test_a_reward_written_by_the_agent_is_not_read(simple: Path) -> None:
    forge = "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo forged"
    out = episode(simple, commands=(forge,))
    assert "forged" in out["outputs"][0]
    assert score(out) == 0.0


def test_the_agent_cannot_see_or_replace_the_tests(simple: Path) -> None:
    plant = (
        "ls /tests 2>/dev/null && echo SEEN; mkdir -p /tests && "
        "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh"
    )
    out = episode(simple, commands=(plant,))
    assert "SEEN" not in out["outputs"][0]
    assert score(out) == 0.0


TEST_STILL_WRITTEN = (
    "a=$(cat /app/late 2>/dev/null); sleep 1; b=$(cat /app/late 2>/dev/null); "
    'if [ "$a" != "$b" ]; then echo 1 > /logs/verifier/reward.txt; '
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)
"""Rewards the attack if anything still writes ``/app/late`` while the tests run."""


def test_a_background_process_of_the_agent_is_dead_before_grading(
    tiny_base: str, tmp_path: Path
) -> None:
    """A process the agent leaves behind keeps counting into ``/app/late`` and forging the
    reward file. What it wrote while the agent ran is the agent's work (carried); that it is
    still writing once the tests start is the attack: the tests see the counter move, or its
    reward file replaces theirs. Whether it got to run before the episode ended depends on the
    machine's load, so nothing here asks it to have (it failed as ``/app/done`` under load)."""
    task = write_task(tmp_path, "late", DOCKERFILE, test_sh=TEST_STILL_WRITTEN, solve_sh=SOLVE)
    late = (
        "nohup setsid bash -c 'for i in $(seq 1 600); do echo $i > /app/late; "
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
        ">/dev/null 2>&1 & echo started"
    )
    out = episode(task, commands=(late,))
    assert "started" in out["outputs"][0]
    assert score(out) == 0.0


# --- the agent owns the image's files: the programs that run the grade are checked -----------
FORGE = "#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n"


@pytest.mark.parametrize(
    "attack",
    [
        # the shell test.sh runs in, replaced by one that writes the reward
        f"p=$(readlink -f /bin/bash); rm -f $p; printf '{FORGE}' > $p; chmod 755 $p",
        # a library preloaded into every program of the verifier
        "echo /app/evil.so > /etc/ld.so.preload",
        # the shell, shadowed earlier on PATH than the image's
        f"mkdir -p /usr/local/bin; printf '{FORGE}' > /usr/local/bin/bash; "
        "chmod 755 /usr/local/bin/bash",
    ],
)
def test_an_agent_that_replaces_the_graders_programs_scores_0(simple: Path, attack: str) -> None:
    out = episode(simple, commands=(attack,))
    grade = out["grades"][0]
    # the separate mode grades over the pristine image: the changed programs never run
    assert isinstance(grade, GraderFailed) or grade.total == 0.0, f"forged: {grade}"
    assert not isinstance(grade, InfraError)


def test_the_verifier_may_write_in_its_copy_of_the_tests(tiny_base: str, tmp_path: Path) -> None:
    """As Harbor's: a test that builds something in /tests (the task's folder is untouched)."""
    test_sh = "echo built > /tests/build.out && cat /tests/build.out >/dev/null\n" + TEST_DONE
    task = write_task(tmp_path, "build-in-tests", DOCKERFILE, test_sh=test_sh, solve_sh=SOLVE)
    assert score(episode(task, oracle=True)) == 1.0
    assert not (task / "tests" / "build.out").exists()
