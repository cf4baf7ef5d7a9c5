"""``envlab arena --catalog``: every environment a catalogue finds, vetted once, resumably,
with a row and a reason for what could not load. Real vetting on envlab's own environments."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from envlab.adapters.catalog import BUILTIN, Found, find, parse_sources
from envlab.cli.arena_catalog import ARENA_FILE, Arena, run_catalog
from envlab.core import ConfigError
from envlab.vet.runner import VetConfig, vet_environment

CFG = VetConfig(oracle_runs=1, samples=2, group_size=2, concurrency=2, tasks=2)


async def real_vet(found: Found, where: Path) -> Any:
    from envlab.envs import load_env

    return await vet_environment(load_env(found.name), out_dir=where, config=CFG)


class Killed(BaseException):
    """What a kill looks like from inside: not an ``Exception`` the arena may catch."""


def test_sources_are_checked() -> None:
    assert parse_sources("envlab, rg") == ["envlab", "rg"]
    assert "vf" in parse_sources("all")
    with pytest.raises(ConfigError, match="--catalog takes sources"):
        parse_sources("envlab,nope")


def test_an_adapter_that_cannot_load_is_a_row_with_its_reason(monkeypatch: Any) -> None:
    monkeypatch.setitem(__import__("sys").modules, "envlab.adapters.verifiers", None)
    [row] = find(["vf"])
    assert not row.loaded and row.name == "vf:*" and "pip install 'envlab[vf]'" in row.reason


def test_the_catalogue_is_vetted_once_and_a_killed_arena_resumes(tmp_path: Path) -> None:
    settings: dict[str, object] = {"tasks": 2}
    seen: list[str] = []

    async def dies_on_the_third(found: Found, where: Path) -> Any:
        if len(seen) == 2:
            raise Killed
        seen.append(found.name)
        return await real_vet(found, where)

    with pytest.raises(Killed):
        asyncio.run(run_catalog(["envlab"], tmp_path, dies_on_the_third, settings=settings,
                                jobs=1, resume=False))  # fmt: skip
    first = Arena.model_validate_json((tmp_path / ARENA_FILE).read_bytes())
    assert [e.name for e in first.entries] == seen  # each finished one was written at once

    with pytest.raises(ConfigError, match="--resume"):
        asyncio.run(run_catalog(["envlab"], tmp_path, real_vet, settings=settings, jobs=2,
                                resume=False))  # fmt: skip
    again: list[str] = []

    async def counted(found: Found, where: Path) -> Any:
        again.append(found.name)
        return await real_vet(found, where)

    arena = asyncio.run(run_catalog(["envlab"], tmp_path, counted, settings=settings, jobs=2,
                                    resume=True))  # fmt: skip
    assert sorted(again) == sorted(set(BUILTIN) - set(seen))  # only what was missing
    names = [e.name for e in arena.entries]
    assert sorted(names) == sorted(BUILTIN) and len(names) == len(set(names))
    for e in arena.entries:
        assert e.status == "vetted" and e.tasks == 2 and e.episodes > 0, e
        assert e.cost_per_episode_s is not None and e.quality_score is not None
    with pytest.raises(ConfigError, match="cannot resume"):
        asyncio.run(run_catalog(["envlab"], tmp_path, real_vet, settings={"tasks": 3}, jobs=2,
                                resume=True))  # fmt: skip


def test_a_vetting_that_fails_is_a_row_and_is_tried_again_on_resume(tmp_path: Path) -> None:
    async def broken(found: Found, where: Path) -> Any:
        raise RuntimeError(f"cannot vet {found.name}")

    arena = asyncio.run(run_catalog(["envlab"], tmp_path, broken, settings={}, jobs=2,
                                    resume=False))  # fmt: skip
    assert {e.status for e in arena.entries} == {"vet_failed"}
    assert all("RuntimeError: cannot vet" in e.reason for e in arena.entries)
    arena = asyncio.run(run_catalog(["envlab"], tmp_path, real_vet, settings={}, jobs=2,
                                    resume=True))  # fmt: skip
    assert {e.status for e in arena.entries} == {"vetted"} and len(arena.entries) == len(BUILTIN)


def test_the_command_writes_the_json_and_the_page(tmp_path: Path) -> None:
    from tests.cli.test_eval_cli import envlab

    out = tmp_path / "arena"
    r = envlab("arena", "--catalog", "envlab", "--tasks", "2", "--samples", "2",
               "--oracle-runs", "1", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads((out / ARENA_FILE).read_text())
    assert {e["name"] for e in data["entries"]} == set(BUILTIN)
    page = (out / "arena.html").read_text()
    assert all(name in page for name in BUILTIN)
    assert "found 5, loaded 5, vetted 5" in r.stdout


HANGS = """
import os, subprocess
from envlab.core import EnvSpec, Task, TaskSet, ToolEnv


class Hangs(ToolEnv):
    async def on_reset(self, task, seed):
        child = subprocess.Popen(["sleep", "600"])  # a helper process it leaves behind
        with open(os.environ["HANGS_PID_FILE"], "w") as f:
            f.write(str(child.pid))
        while True:  # a puzzle generator that never finds its puzzle, on the event loop
            pass


class HangsEnv(EnvSpec):
    id = "hangs"
    environment = Hangs

    def tasks(self, *, seed=0, n=None, split="test"):
        return TaskSet([Task(id="t0", prompt="2+2?", answer="4", split=split)], name=self.id)
"""


def test_an_environment_that_never_finishes_is_stopped_with_its_children(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Third-party code runs in the vetting process: one that hangs (and leaves a child) is
    killed with its process group at the budget and becomes a ``timed_out`` row; the arena
    goes on with the next environment."""
    from envlab.cli.arena_catalog import process_vet

    (tmp_path / "hangs.py").write_text(HANGS)
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("HANGS_PID_FILE", str(pid_file))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{Path.cwd() / 'src'}")
    monkeypatch.chdir(tmp_path)
    args = ["--agent", "none", "--samples", "2", "--oracle-runs", "1", "--tasks", "1"]
    in_a_process = process_vet(args, timeout_s=15)

    async def vet(found: Found, where: Path) -> Any:  # calc in-process: its time is not tested
        return await (in_a_process if found.name.startswith("hangs") else real_vet)(found, where)

    catalogue = [Found(name="hangs.py:HangsEnv", source="test", loaded=True),
                 Found(name="calc", source="envlab", loaded=True)]  # fmt: skip
    monkeypatch.setattr("envlab.cli.arena_catalog.find", lambda sources: catalogue)
    arena = asyncio.run(run_catalog(["envlab"], tmp_path / "a", vet, settings={}, jobs=1,
                                    resume=False))  # fmt: skip
    rows = {e.name: e for e in arena.entries}
    assert rows["hangs.py:HangsEnv"].status == "timed_out"
    assert "--env-timeout" in rows["hangs.py:HangsEnv"].reason
    assert rows["calc"].status == "vetted" and rows["calc"].tasks == 2  # CFG's tasks
    stat = Path(f"/proc/{int(pid_file.read_text())}/stat")  # the helper died with the group
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
