"""The training section of a report, for runs written by ``envlab train``: the reward-over-time
plot (``reward.png``, inlined), the totals of ``metrics.jsonl`` and the held-out comparison
(``heldout.json``). Plain HTML, drawn without the page's script."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from envlab.runs.metrics import HELDOUT_FILE, METRICS_FILE, PLOT_FILE, read_metrics, totals


def _cell(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3f}"
    return html.escape(str(x))


TOTAL_LABELS = {
    "steps": "learner steps",
    "episodes": "episodes",
    "elapsed_s": "seconds",
    "first_reward": "batch reward, first step",
    "last_reward": "batch reward, last step",
    "staleness": "samples by staleness",
    "dropped_stale": "groups dropped as stale",
    "dropped_groups": "groups dropped (fewer than 2 graded samples)",
    "excluded_samples": "samples excluded (infra or env errors)",
    "dead_groups": "dead groups (mean fraction)",
}


def _totals(run_dir: Path) -> list[tuple[str, Any]]:
    t = totals(read_metrics(run_dir / METRICS_FILE))
    if not t["steps"]:
        return []
    if isinstance(t.get("staleness"), dict):
        t["staleness"] = " ".join(f"{k}: {v}" for k, v in t["staleness"].items())
    return [(label, t[key]) for key, label in TOTAL_LABELS.items()]


def _heldout(run_dir: Path) -> str:
    path = run_dir / HELDOUT_FILE
    if not path.exists():
        return ""
    h = json.loads(path.read_text())
    pct = f"{h['confidence']:.0%}"
    rows = [
        f"<tr><th>policy</th><th>mean reward</th><th>{pct} CI</th><th>of best achievable</th>"
        "<th>gap closed</th></tr>"
    ]
    for r in h["rows"]:
        ci = "-" if r["low"] is None else f"{r['low']:.3f} to {r['high']:.3f}"
        frac = "-" if r["fraction_of_best"] is None else f"{r['fraction_of_best']:.1%}"
        mean = "-" if r["mean"] is None else f"{r['mean']:.3f}"
        gap = "-" if r.get("gap_closed") is None else f"{r['gap_closed']:.1%}"
        rows.append(
            f"<tr><td>{_cell(r['name'])} ({_cell(r['agent'])})</td><td>{mean}</td>"
            f"<td>{ci}</td><td>{frac}</td><td>{gap}</td></tr>"
        )
    title = f"held-out: {h['rows'][0]['n_tasks']} tasks of split {_cell(h['split'])}"
    return f"<h3>{title}</h3><table>{''.join(rows)}</table>"


def training_section(run_dir: Path) -> str:
    """The section's HTML, or ``""`` for a run that is not a train run."""
    totals = _totals(run_dir)
    if not totals:
        return ""
    parts = [f"<section class='training'><h2>training: {_cell(run_dir.name)}</h2>"]
    plot = run_dir / PLOT_FILE
    if plot.exists():
        data = base64.b64encode(plot.read_bytes()).decode()
        parts.append(
            f"<img alt='reward over learner steps and time' src='data:image/png;base64,{data}'"
            " style='max-width:100%'>"
        )
    rows = "".join(f"<tr><td>{_cell(k)}</td><td>{_cell(v)}</td></tr>" for k, v in totals)
    parts.append(f"<table>{rows}</table>{_heldout(run_dir)}</section>")
    return "".join(parts)
