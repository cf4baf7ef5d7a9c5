"""``envlab task import terminal-bench DIR`` on small synthetic TB1 tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envlab.cli.task import task_app
from tests.importers.test_terminal_bench import make_tb1_task

pytest.importorskip("yaml")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(task_app, ["import", *args])
    return result.exit_code, result.output


def test_import_prints_json_per_task_and_fails_when_one_failed(tmp_path: Path) -> None:
    make_tb1_task(tmp_path / "tb1", "good")
    make_tb1_task(tmp_path / "tb1", "broken", **{"run-tests.sh": None})
    out = tmp_path / "harbor"
    code, text = invoke("terminal-bench", str(tmp_path / "tb1"), "--out", str(out), "--json")
    assert code == 1
    report = json.loads(text)
    assert [(t["name"], t["status"]) for t in report["tasks"]] == [
        ("broken", "failed"),
        ("good", "mapped"),
    ]
    assert report["dest"] == str(out.resolve())
    assert (out / "good" / "tests" / "test.sh").is_file() and not (out / "broken").exists()


def test_import_prints_a_table_and_writes_to_harbor_tasks_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_tb1_task(tmp_path / "tb1")
    monkeypatch.chdir(tmp_path)
    code, text = invoke("terminal-bench", str(src))
    assert code == 0, text
    assert "hello" in text and "mapped" in text and "1 mapped" in text
    assert (tmp_path / "harbor-tasks" / "hello" / "task.toml").is_file()
    code, text = invoke("terminal-bench", str(src))
    assert code == 1 and "--overwrite" in text
    code, text = invoke("terminal-bench", str(src), "--overwrite")
    assert code == 0, text


def test_import_refuses_an_unknown_kind_or_a_folder_without_tasks(tmp_path: Path) -> None:
    code, text = invoke("swe-bench", str(tmp_path))
    assert code == 2 and "terminal-bench" in text
    from envlab.core.errors import ConfigError

    result = CliRunner().invoke(task_app, ["import", "terminal-bench", str(tmp_path)])
    assert isinstance(result.exception, ConfigError)
    assert "neither a Terminal-Bench task folder" in str(result.exception)
