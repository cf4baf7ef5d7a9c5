"""The end-to-end example of docs/environments.md runs as written: loaded by its ``file.py:Class``
name, the oracle scores 1 and doing nothing 0, and vet finds nothing wrong with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import AgentClass
from envlab.envs import load_env
from envlab.rollout import rollout

DOC = Path(__file__).resolve().parents[2] / "docs" / "environments.md"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """The example as a file of its own (one module name per test: a file is imported once)."""
    text = DOC.read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "# shop.py" in b]
    name = f"shop_{request.node.name[5:25]}.py"
    (tmp_path / name).write_text(block)
    monkeypatch.chdir(tmp_path)
    return f"{name}:ShopEnv"


async def test_the_example_environment_plays_and_grades(shop: str, tmp_path: Path) -> None:
    spec = load_env(shop)
    tasks = spec.tasks(n=4)
    for agent, want in ((OracleAgent, 1.0), (NoopAgent, 0.0)):
        run = await rollout(spec, AgentClass(agent), tasks, out_dir=tmp_path / agent.__name__)
        assert [r.reward for r in run.records] == [want] * 4, run.records


async def test_vet_finds_nothing_wrong_with_it(shop: str, tmp_path: Path) -> None:
    from envlab.vet.runner import VetConfig, vet_environment

    cfg = VetConfig(oracle_runs=2, samples=2, group_size=2, concurrency=2, tasks=6)
    report = await vet_environment(load_env(shop), out_dir=tmp_path / "vet", config=cfg)
    assert report.verdict_counts["ok"] == 6, [
        (t.task_id, t.verdict, [c.summary for c in t.checks if c.status == "fail"])
        for t in report.tasks
    ]
