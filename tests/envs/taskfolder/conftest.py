from __future__ import annotations

import os
import stat
import tempfile
import textwrap
from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import Agent, Trajectory
from envlab.envs.taskfolder import TerminalEnv
from envlab.rollout import EpisodeConfig, run_episode

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"


@pytest.fixture(autouse=True, scope="session")
def _private_build_cache() -> None:
    """Builds of this session go to a cache of their own (also for CLI subprocesses)."""
    if "ENVLAB_CACHE_DIR" not in os.environ:
        os.environ["ENVLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="envlab-test-cache-")


def write(path: Path, text: str, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def make_task(
    root: Path,
    name: str = "t",
    *,
    test_sh: str = "echo 1 > /logs/verifier/reward.txt\n",
    solve_sh: str | None = "true\n",
    dockerfile: str | None = None,
    files: dict[str, str] | None = None,
    tests: dict[str, str] | None = None,
    toml: str = "",
    instruction: str = "Do the thing.\n",
) -> Path:
    """A task folder under ``root``."""
    task = root / name
    write(task / "instruction.md", instruction)
    write(task / "task.toml", "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n" + toml)
    write(task / "tests" / "test.sh", "#!/bin/bash\n" + textwrap.dedent(test_sh), True)
    for rel, text in (tests or {}).items():
        write(task / "tests" / rel, text)
    if solve_sh is not None:
        write(task / "solution" / "solve.sh", "#!/bin/bash\n" + textwrap.dedent(solve_sh), True)
    (task / "environment").mkdir(exist_ok=True)
    if dockerfile is not None:
        write(task / "environment" / "Dockerfile", dockerfile)
    for rel, text in (files or {}).items():
        write(task / "environment" / rel, text)
    return task


async def episode(
    path: Path,
    agent: Agent | str,
    *,
    config: EpisodeConfig | None = None,
    task_id: str | None = None,
) -> Trajectory:
    """One real episode on the task folder at ``path``."""
    if isinstance(agent, str):
        agent = {"oracle": OracleAgent(), "noop": NoopAgent()}[agent]
    env = TerminalEnv(path)
    task = env.tasks().by_id(task_id) if task_id else env.tasks()[0]
    return await run_episode(
        env,
        agent,
        task,
        0,
        env_id="test",
        env_hash=env.content_hash(),
        agent_spec=agent.spec,
        config=config or EpisodeConfig(step_timeout=None, max_retries=0),
    )
