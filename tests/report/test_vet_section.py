"""The report's vetting section: a vet directory drawn as a row, its text escaped (a reason may
quote what a probe read, which an environment or an agent wrote)."""

from __future__ import annotations

import json
from pathlib import Path

from envlab.report.vet import is_vet_dir, vet_section


def write_vet(path: Path, reason: str) -> Path:
    path.mkdir(parents=True)
    tasks = [
        {"task_id": "a", "verdict": "quarantine", "reasons": [reason], "checks": []},
        {"task_id": "b", "verdict": "ok", "reasons": [], "checks": []},
    ]
    report = {"env_id": "env<1>", "tasks": tasks, "verdict_counts": {"ok": 1, "quarantine": 1}}
    (path / "vet.json").write_text(json.dumps(report))
    return path


def test_a_hostile_reason_is_text_not_markup(tmp_path: Path) -> None:
    vet = write_vet(tmp_path / "v", "answer_leak: <script>alert(1)</script> in a tool's reply")
    assert is_vet_dir(vet) and not is_vet_dir(tmp_path)
    html = vet_section([vet])
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "env&lt;1&gt;" in html and "quarantine 1" in html
    assert "<b>answer_leak</b> (1 tasks): &lt;script&gt;" in html
    assert vet_section([]) == ""
