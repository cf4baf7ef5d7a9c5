"""``arena.html``: the tasks with a finding first, open; the tasks that pass folded away."""

from __future__ import annotations

import re
from pathlib import Path

from envlab.vet.arena import rank, write_html
from envlab.vet.checks import result
from envlab.vet.model import EnvVet
from envlab.vet.verdict import quality_score, task_verdict, verdict_counts


def _report() -> EnvVet:
    oracle = result("oracle", "pass", "passed 5/5")
    fine = [oracle, result("noop", "pass", "0")]
    tasks = [
        task_verdict("fine-1", fine),
        task_verdict("leaky", [oracle, result("noop", "fail", "doing nothing scores 1")]),
        task_verdict("fine-2", fine),
    ]
    return EnvVet(
        env_id="e", env_hash="h", envlab_version="0", created_at=0.0, agent=None, settings={},
        verdict_counts=verdict_counts(tasks), quality_score=quality_score(tasks), clean=True,
        env_checks=[], tasks=tasks, elapsed_s=1.0, episodes=6, infra_errors=0,
    )  # fmt: skip


def test_passing_tasks_are_collapsed_and_problems_shown_open(tmp_path: Path) -> None:
    rep = _report()
    page = write_html(rank([rep]), [rep], tmp_path / "arena.html").read_text()
    folded = re.search(r"<details class='passing'>(.*?)</table></details>", page, re.S)
    assert folded is not None and "2 task(s) pass every check" in folded.group(1)
    assert "fine-1" in folded.group(1) and "fine-2" in folded.group(1)
    assert "leaky" not in folded.group(1)
    before = page[: folded.start()]
    assert "<td>leaky</td>" in before and "1 task(s) with a finding" in before
    leaky_row = re.search(r"<tr><td>leaky</td>.*?</tr>", before, re.S)
    assert leaky_row is not None
    # the failing check is open, the passing one folded
    assert "<details open><summary>fail</summary>doing nothing scores 1" in leaky_row.group(0)
    assert "<details><summary>pass</summary>passed 5/5" in leaky_row.group(0)


def test_an_environment_whose_tasks_all_pass_shows_no_finding_table(tmp_path: Path) -> None:
    rep = _report()
    rep.tasks = [t for t in rep.tasks if t.verdict == "ok"]
    page = write_html(rank([rep]), [rep], tmp_path / "arena.html").read_text()
    assert "with a finding" not in page and "2 task(s) pass every check" in page
