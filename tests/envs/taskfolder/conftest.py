from __future__ import annotations

import copy
import os
import stat
import tempfile
import textwrap
from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import Agent, AgentClass, AgentFactory, EnvSpec, Trajectory
from envlab.envs.taskfolder import TerminalEnv
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episode

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


def factory(agent: Agent | AgentFactory | str) -> AgentFactory:
    """``oracle``, ``noop``, a factory as it is, or an agent not yet started (each attempt
    gets a fresh copy of it)."""
    if isinstance(agent, AgentFactory):
        return agent
    if isinstance(agent, str):
        return AgentClass({"oracle": OracleAgent, "noop": NoopAgent}[agent])
    return AgentClass(copy.copy, agent)


async def episode(
    path: Path | None,
    agent: Agent | AgentFactory | str,
    *,
    config: EpisodeConfig | None = None,
    task_id: str | None = None,
    spec: EnvSpec | None = None,
) -> Trajectory:
    """One real episode, through the engine, on the task folder at ``path`` (or of ``spec``)."""
    spec = spec or TerminalEnv(path)
    task = spec.tasks().by_id(task_id) if task_id else spec.tasks()[0]
    planned = PlannedEpisode(
        task, 0, episode_ids(spec.name, spec.content_hash(), task.id, 0, 0), factory(agent)
    )
    return await run_episode(spec, planned, config=config or EpisodeConfig(max_retries=0))
