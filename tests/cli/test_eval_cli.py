from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=120
    )


def test_oracle_scores_one_noop_zero(tmp_path: Path) -> None:
    for agent, want in (("oracle", 1.0), ("noop", 0.0)):
        r = envlab(
            "eval", "arith", "--agent", agent, "--tasks", "50", "--samples", "4",
            "--out", str(tmp_path / agent), "--json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        assert s["pass_at_k"]["1"] == want and s["n_episodes"] == 200
        on_disk = json.loads((tmp_path / agent / "summary.json").read_text())
        assert on_disk["pass_at_k"]["1"] == want
        run = json.loads((tmp_path / agent / "run.json").read_text())
        assert run["command"][:3] == ["envlab", "eval", "arith"]
        assert run["env_hash"] and run["agent"]["name"] == agent


def test_table_output(tmp_path: Path) -> None:
    r = envlab("eval", "calc", "--agent", "oracle", "--tasks", "5", "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    assert "pass@1" in r.stdout and "1.000" in r.stdout


def test_unknown_names_list_the_known_ones(tmp_path: Path) -> None:
    r = envlab("eval", "nope", "--agent", "oracle", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "Known environments: arith, calc" in r.stderr
    r = envlab("eval", "arith", "--agent", "nope", "--out", str(tmp_path / "y"))
    assert (
        r.returncode == 2
        and "Known agents: noop, openai, oracle, random, shell, smollm2" in r.stderr
    )


def test_envs_lists_json() -> None:
    r = envlab("envs", "--json")
    names = {row["name"] for row in json.loads(r.stdout)}
    assert {"arith", "calc"} <= names
