"""The vetting section of a report, for directories written by ``envlab vet`` (``vet.json``): one
row per environment, its verdict counts and why tasks were thrown out. Plain HTML."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envlab.runs import VET_FILE


def is_vet_dir(path: Path) -> bool:
    return (path / VET_FILE).is_file()


def vet_section(vet_dirs: Sequence[Path]) -> str:
    """The section's HTML, or ``""`` when no directory is given."""
    if not vet_dirs:
        return ""
    rows = [
        "<tr><th>environment</th><th>tasks</th><th>ok</th><th>thrown out</th>"
        "<th>why: each check that failed, its tasks, its first reason</th></tr>"
    ]
    for path in vet_dirs:
        report = json.loads((path / VET_FILE).read_text())
        tasks = report["tasks"]
        bad = [t for t in tasks if t["verdict"] != "ok"]
        verdicts = report["verdict_counts"].items()
        counts = ", ".join(f"{k} {v}" for k, v in verdicts if v and k != "ok")
        why = "<br>".join(
            f"<b>{html.escape(check)}</b> ({n} tasks): {html.escape(first)}"
            for check, (n, first) in _by_check(bad).items()
        )
        rows.append(
            f"<tr><td>{html.escape(report['env_id'])}</td><td>{len(tasks)}</td>"
            f"<td>{len(tasks) - len(bad)}</td><td>{html.escape(counts) or '-'}</td>"
            f"<td>{why or '-'}</td></tr>"
        )
    return f"<section class='vetting'><h2>vetting</h2><table>{''.join(rows)}</table></section>"


def _by_check(tasks: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """``check -> (tasks it failed, its first reason)``; a reason reads ``check: why``."""
    out: dict[str, tuple[int, str]] = {}
    for t in tasks:
        for check in dict.fromkeys(r.split(":", 1)[0] for r in t["reasons"]):
            n, first = out.get(check, (0, ""))
            reason = next(r for r in t["reasons"] if r.split(":", 1)[0] == check)
            out[check] = (n + 1, first or reason.split(":", 1)[-1].strip())
    return out
