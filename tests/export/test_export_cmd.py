"""``envlab export`` as a user runs it: the file, the counts (table and --json), the errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from envlab.runs import RunDir
from tests.conftest import subprocess_env


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
    assert r.returncode == 2 and "is not one of sft, dpo, grpo, tokens" in r.stderr
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
