"""``envlab vet`` and ``envlab arena`` from the command line: JSON, ranking, the HTML page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=300
    )


def test_vet_json_follows_the_schema(tmp_path: Path) -> None:
    r = run("vet", "calc", "--agent", "none", "--tasks", "10", "--out", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["schema_version"] == "1" and data["quality_score"] == 100.0
    assert data == json.loads((tmp_path / "vet.json").read_text())
    checks = {c["name"] for c in data["tasks"][0]["checks"]}
    assert {"noop", "oracle", "regrade", "answer_leak", "reset_hygiene"} <= checks


def test_arena_ranks_environments_and_writes_a_page(tmp_path: Path) -> None:
    r = run(
        "arena", "calc", "tests.fixtures.vet_envs:LeakyPromptEnv",
        "tests.fixtures.vet_envs:AlwaysYesEnv", "--agent", "none", "--tasks", "12",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ranking = json.loads((tmp_path / "arena.json").read_text())
    assert ranking[0]["env_id"] == "calc"
    assert ranking[0]["clean"] and ranking[0]["quality_score"] == 100.0
    leaky = next(x for x in ranking if x["env_id"] == "leaky-prompt")  # env_id is spec.name
    assert not leaky["clean"] and leaky["rank"] == 3  # quarantined envs rank last
    page = (tmp_path / "arena.html").read_text()
    assert "envlab arena" in page and "leaky-prompt" in page and "quarantine" in page
    assert "<script src" not in page and "http://" not in page  # self-contained


def test_vet_rejects_bad_options(tmp_path: Path) -> None:
    r = run("vet", "calc", "--samples", "1", "--out", str(tmp_path))
    assert r.returncode == 2 and "--samples must be >= 2" in r.stderr
    r = run("vet", "no/such/folder", "--out", str(tmp_path))
    assert r.returncode == 2 and "no task folder at" in r.stderr
