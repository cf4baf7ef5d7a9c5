"""``envlab arena``: rank environments by their vetting, and show it as one HTML page."""

from __future__ import annotations

import html
import json
from pathlib import Path

from pydantic import BaseModel

from envlab.vet.model import EnvVet, TaskVet, Verdict


class Ranked(BaseModel):
    rank: int
    env_id: str
    env_hash: str
    quality_score: float
    clean: bool
    tasks: int
    verdict_counts: dict[Verdict, int]


def rank(reports: list[EnvVet]) -> list[Ranked]:
    """Clean environments first, then by quality score, then by fewer quarantined tasks."""
    order = sorted(
        reports,
        key=lambda r: (not r.clean, -r.quality_score, r.verdict_counts["quarantine"], r.env_id),
    )
    return [
        Ranked(
            rank=i + 1,
            env_id=r.env_id,
            env_hash=r.env_hash,
            quality_score=r.quality_score,
            clean=r.clean,
            tasks=len(r.tasks),
            verdict_counts=r.verdict_counts,
        )
        for i, r in enumerate(order)
    ]


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 24px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}
.pass{background:#e6f4ea}.fail{background:#fce8e6;font-weight:600}.warn{background:#fef7e0}
.na{color:#999}
.v-ok{color:#137333;font-weight:600}.v-quarantine{color:#fff;background:#c5221f;padding:1px 6px}
.v-broken{color:#c5221f;font-weight:600}.v-trivial{color:#b06000;font-weight:600}
.v-dead{color:#8430ce;font-weight:600}
details{margin:4px 0}pre{white-space:pre-wrap;background:#f8f8f8;padding:6px;max-height:300px;overflow:auto}
"""


def write_html(
    ranking: list[Ranked],
    reports: list[EnvVet],
    path: str | Path,
    unvetted: list[tuple[str, str, str]] | None = None,
) -> Path:
    """One self-contained page: the ranking, then every environment's checks per task. Tasks
    with a finding come first, their failing checks open; the tasks that pass are folded into
    one ``<details>`` per environment. ``unvetted``: ``(name, status, reason)`` of the
    environments a catalogue found but could not load or vet, each with its reason."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    e = html.escape
    by_id = {(r.env_id, r.env_hash): r for r in reports}
    parts = [f"<!doctype html><meta charset=utf-8><title>envlab arena</title><style>{_CSS}</style>"]
    parts.append(
        "<h1>envlab arena</h1><p>Environments ranked by their vetting: clean first "
        "(no quarantined task), then by quality score (share of ok tasks).</p>"
    )
    parts.append(
        "<table><tr><th>rank</th><th>environment</th><th>score</th><th>clean</th>"
        "<th>ok</th><th>quarantine</th><th>broken</th><th>trivial</th><th>dead</th>"
        "<th>tasks</th></tr>"
    )
    for r in ranking:
        c = r.verdict_counts
        parts.append(
            f"<tr><td>{r.rank}</td><td><a href='#env-{r.rank}'>{e(r.env_id)}</a></td>"
            f"<td>{r.quality_score:.1f}</td><td>{'yes' if r.clean else 'no'}</td>"
            + "".join(f"<td>{c[k]}</td>" for k in ("ok", "quarantine", "broken", "trivial", "dead"))
            + f"<td>{r.tasks}</td></tr>"
        )
    parts.append("</table>")
    if unvetted:
        parts.append(
            f"<h2>{len(unvetted)} environment(s) not vetted</h2><table><tr><th>environment"
            "</th><th>status</th><th>why</th></tr>"
            + "".join(
                f"<tr><td>{e(n)}</td><td>{e(s)}</td><td>{e(why)}</td></tr>"
                for n, s, why in unvetted
            )
            + "</table>"
        )
    for r in ranking:
        parts += _env_section(r.rank, by_id[(r.env_id, r.env_hash)])
    path.write_text("\n".join(parts))
    return path


def _env_section(rank: int, rep: EnvVet) -> list[str]:
    e = html.escape
    parts = [
        f"<h2 id='env-{rank}'>{rank}. {e(rep.env_id)} <small>({e(rep.env_hash)}, "
        f"{rep.episodes} episodes, {rep.elapsed_s:.0f}s)</small></h2>",
        "<ul>"
        + "".join(
            f"<li class='{c.status.replace('/', '')}'><b>{e(c.name)}</b> ({c.status}): "
            f"{e(c.summary)}</li>"
            for c in rep.env_checks
        )
        + "</ul>",
    ]
    problems = [t for t in rep.tasks if t.verdict != "ok"]
    passing = [t for t in rep.tasks if t.verdict == "ok"]
    if problems:
        parts.append(f"<h3>{len(problems)} task(s) with a finding</h3>")
        parts.append(_task_table(problems, open_findings=True))
    if passing:
        parts.append(
            f"<details class='passing'><summary>{len(passing)} task(s) pass every check "
            f"(verdict ok)</summary>{_task_table(passing, open_findings=False)}</details>"
        )
    return parts


def _task_table(tasks: list[TaskVet], *, open_findings: bool) -> str:
    e = html.escape
    names = [c.name for c in tasks[0].checks]
    header = "".join(f"<th>{e(n)}</th>" for n in names)
    rows = [f"<table><tr><th>task</th><th>verdict</th>{header}</tr>"]
    for t in tasks:
        cells = []
        for c in t.checks:
            ev = e(json.dumps(c.evidence, indent=1, default=str)[:4000])
            opened = " open" if open_findings and c.status == "fail" else ""
            cells.append(
                f"<td class='{c.status.replace('/', '')}'><details{opened}><summary>{c.status}"
                f"</summary>{e(c.summary)}<pre>{ev}</pre></details></td>"
            )
        rows.append(
            f"<tr><td>{e(t.task_id)}</td><td><span class='v-{t.verdict}'>{t.verdict}</span></td>"
            f"{''.join(cells)}</tr>"
        )
    rows.append("</table>")
    return "".join(rows)
