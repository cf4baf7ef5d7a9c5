"""The vetting section of a report, for directories written by ``envlab vet`` (``vet.json``): one
row per environment, its verdict counts and why tasks were thrown out. Plain HTML."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

VET_FILE = "vet.json"
"""What ``envlab vet`` writes (``envlab.vet.runner.VET_FILE``; not imported: the vet machinery
is heavy, and a report reads only the file)."""


def is_vet_dir(path: Path) -> bool:
    return (path / VET_FILE).is_file()


def vet_section(vet_dirs: Sequence[Path]) -> str:
    """The section's HTML, or ``""`` when no directory is given."""
    if not vet_dirs:
        return ""
    rows = [
        "<tr><th>environment</th><th>tasks</th><th>ok</th><th>thrown out</th>"
        "<th>why (each reason once)</th></tr>"
    ]
    for path in vet_dirs:
        report = json.loads((path / VET_FILE).read_text())
        tasks = report["tasks"]
        bad = [t for t in tasks if t["verdict"] != "ok"]
        reasons = list(dict.fromkeys(r for t in bad for r in t["reasons"]))
        counts = ", ".join(
            f"{k} {v}" for k, v in report["verdict_counts"].items() if v and k != "ok"
        )
        why = "<br>".join(html.escape(r) for r in reasons) or "-"
        rows.append(
            f"<tr><td>{html.escape(report['env_id'])}</td><td>{len(tasks)}</td>"
            f"<td>{len(tasks) - len(bad)}</td><td>{html.escape(counts) or '-'}</td>"
            f"<td>{why}</td></tr>"
        )
    return f"<section class='vetting'><h2>vetting</h2><table>{''.join(rows)}</table></section>"
