"""``envlab export`` as a user runs it: the file, the counts (table and --json), the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlab.runs import RunDir
from tests.conftest import subprocess_env
from tests.export.runs import INFRA, PLAN, Ep, trajectory, write_run


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**subprocess_env(), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "envlab.cli.main", "export", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def test_export_grpo_prints_the_counts(run: RunDir, tmp_path: Path) -> None:
    out = tmp_path / "grpo.parquet"
    r = envlab(str(run.path), "--format", "grpo", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["n_rows"], got["n_unscored"], got["dead_groups"]) == (10, 2, 2)
    assert got["unscored"] == {"env_error": 1, "infra_error": 1} and out.is_file()
    table = envlab(str(run.path), "-f", "grpo", "-o", str(tmp_path / "g.jsonl"), "--drop-dead")
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "rows exported │ 6" in text and "infra_error │ 1" in text
    assert "in a dead group (--drop-dead) │ 4" in text


def test_tokens_of_another_model_need_its_tokenizer(
    run: RunDir, tmp_path: Path, tokenizer_dir: Path
) -> None:
    out = tmp_path / "t.jsonl"
    r = envlab(str(run.path), "--format", "tokens", "--out", str(out))
    assert r.returncode == 2 and "--tokenizer DIR" in r.stderr and not out.exists()
    ok = envlab(str(run.path), "-f", "tokens", "-o", str(out), "--tokenizer", str(tokenizer_dir))
    assert ok.returncode == 0, ok.stderr
    assert len(out.read_text().splitlines()) == 10


def test_wrong_arguments_say_what_to_do(run: RunDir, tmp_path: Path) -> None:
    r = envlab(str(run.path), "--format", "ppo", "--out", str(tmp_path / "x.jsonl"))
    assert r.returncode == 2 and "is not one of sft, dpo, grpo, tokens, verl" in r.stderr
    r = envlab(str(run.path), "--format", "sft")
    assert r.returncode == 2 and "--out FILE" in r.stderr
    r = envlab(str(tmp_path / "nowhere"), "--check")
    assert r.returncode == 2 and "no run directory" in r.stderr


def test_the_export_code_imports_nothing_heavy() -> None:
    code = (
        "import sys, envlab, envlab.export, envlab.cli.main\n"
        "heavy = ('torch', 'trl', 'pyarrow', 'transformers', 'datasets', 'rich', 'llama_cpp')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env()
    )
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


# --- an export with no row: exit 2, why, what to do, and no file --------------------------------


def no_file_and(r: subprocess.CompletedProcess[str], out: Path, *said: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    text = " ".join(r.stderr.split())
    assert "no row, so no file was written" in text and all(s in text for s in said), text
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_tokens_of_a_run_without_token_views(tmp_path: Path, tok: Any, suffix: str) -> None:
    trajs = [trajectory(tok, ep) for ep in PLAN]
    for t in trajs:
        t.tokens = None  # a server that returned no token ids
    run = write_run(tmp_path / "run", trajs)
    out = tmp_path / f"t.{suffix}"
    r = envlab(str(run), "--format", "tokens", "--out", str(out), "--no-check")
    no_file_and(r, out, "no token view (10)", "run an agent whose server returns token ids")


def test_grpo_of_dead_groups_only_with_drop_dead(tmp_path: Path, tok: Any) -> None:
    run = write_run(tmp_path / "run", [trajectory(tok, ep) for ep in PLAN if ep.task in (1, 2)])
    out = tmp_path / "g.parquet"
    r = envlab(str(run), "-f", "grpo", "-o", str(out), "--drop-dead")
    no_file_and(r, out, "in a dead group (--drop-dead) (4)", "no reward variance: leave out")
    ok = envlab(str(run), "-f", "grpo", "-o", str(out))  # dead groups go out with advantage 0
    assert ok.returncode == 0 and out.is_file(), ok.stderr


def test_sft_above_every_reward_and_dpo_without_pairs(run: RunDir, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    r = envlab(str(run.path), "-f", "sft", "-o", str(out), "--min-reward", "2")
    no_file_and(r, out, "below --min-reward (10)", "lower --min-reward")
    out = tmp_path / "dpo.jsonl"
    r = envlab(str(run.path), "-f", "dpo", "-o", str(out), "--min-margin", "1.5")
    no_file_and(r, out, "margin below --min-margin (3)", "(counted by group)", "--samples")


def test_a_run_of_unscored_episodes_only(tmp_path: Path, tok: Any) -> None:
    run = write_run(tmp_path / "run", [trajectory(tok, Ep(0, i, None, INFRA)) for i in range(3)])
    out = tmp_path / "g.jsonl"
    r = envlab(str(run), "-f", "grpo", "-o", str(out), "--json")
    no_file_and(r, out, "None of the run's 3 episodes was scored (3 infra_error)", "--resume")
