"""``TerminalEnv``, the spec of task folders: name, limits from task.toml, a hash that follows
the files (not where they are, not the process), the sandbox backend, fresh episodes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlab.core import Action, ConfigError, Limits, NotFoundError, Task, ToolCall
from envlab.envs.taskfolder import TerminalEnv, TerminalEpisode
from envlab.envs.taskfolder.spec import MAX_STEPS, SETUP_MARGIN_S
from tests.conftest import subprocess_env
from tests.envs.taskfolder.conftest import make_task, write
from tests.sandbox.conftest import requires_bwrap

TOML = "[environment]\nbuild_timeout_sec = 200\n"


def test_name_is_the_directory(tmp_path: Path) -> None:
    one = make_task(tmp_path / "suite", "solo")
    assert TerminalEnv(one).name == "taskfolder:solo"
    make_task(tmp_path / "suite", "other")
    spec = TerminalEnv(tmp_path / "suite")
    assert spec.name == "taskfolder:suite" and spec.path == (tmp_path / "suite").resolve()


def test_limits_are_the_tasks_own(tmp_path: Path) -> None:
    spec = TerminalEnv(make_task(tmp_path, toml=TOML))  # agent 60 s, verifier 30 s
    assert spec.limits(spec.tasks()[0]) == Limits(
        max_steps=MAX_STEPS,
        step_timeout_s=None,
        episode_timeout_s=60,
        reset_timeout_s=200 + SETUP_MARGIN_S,
        grade_timeout_s=30 + SETUP_MARGIN_S,
    )
    mine = Limits.overrides(episode_timeout_s=5)
    assert mine.over(spec.limits(spec.tasks()[0])).episode_timeout_s == 5
    with pytest.raises(NotFoundError, match="not in"):
        spec.limits(Task(id="elsewhere", prompt="p"))


HASH = "from envlab.envs.taskfolder import TerminalEnv; import sys; "
HASH += "print(TerminalEnv(sys.argv[1], run_timeout=30).content_hash())"


def hash_in_a_new_process(path: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", HASH, str(path)],
        capture_output=True, text=True, env=subprocess_env(), check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.strip()


def test_hash_is_stable_across_processes_and_places(tmp_path: Path) -> None:
    path = make_task(tmp_path / "a", "t")
    here = TerminalEnv(path, run_timeout=30).content_hash()
    assert hash_in_a_new_process(path) == here
    elsewhere = tmp_path / "b" / "t"
    shutil.copytree(path, elsewhere, symlinks=True)
    assert hash_in_a_new_process(elsewhere) == here, "the same files elsewhere: the same env"
    assert TerminalEnv(path).content_hash() != here, "another config: another hash"
    write(path / "tests" / "test.sh", "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    assert TerminalEnv(path, run_timeout=30).content_hash() != here


def test_only_an_isolating_sandbox_backend(tmp_path: Path) -> None:
    path = make_task(tmp_path)
    assert TerminalEnv(path, sandbox="bwrap").config.sandbox == "bwrap"
    with pytest.raises(ConfigError, match="does not isolate the agent"):
        TerminalEnv(path, sandbox="local")
    with pytest.raises(ConfigError, match="sandbox"):
        TerminalEnv(path, sandbox="docker")
    with pytest.raises(ConfigError, match="run_timeout"):
        TerminalEnv(path, run_timeout=0)


@requires_bwrap
async def test_two_episodes_of_one_spec_share_nothing(tmp_path: Path) -> None:
    spec = TerminalEnv(make_task(tmp_path, files={"seed.txt": "x\n"}))
    task = spec.tasks()[0]
    first, second = spec.new_episode(), spec.new_episode()
    assert isinstance(first, TerminalEpisode) and first is not second
    try:
        await first.reset(task)
        await second.reset(task)
        assert first.state()["workspace_at_reset"] == second.state()["workspace_at_reset"]
        write_call = ToolCall("write_file", {"path": "mine.txt", "content": "first"})
        await first.step(Action(tool_calls=[write_call]))
        res = await second.step(Action(tool_calls=[ToolCall("run", {"command": "ls"})]))
        assert "seed.txt" in res.observation.tool_results[0].content
        assert "mine.txt" not in res.observation.tool_results[0].content
    finally:
        await first.close()
        await second.close()
    with pytest.raises(NotFoundError, match="not in"):
        await spec.new_episode().reset(Task(id="elsewhere", prompt="p"))
