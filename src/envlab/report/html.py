"""Assemble one self-contained HTML file: inline CSS and JS, data in JSON script elements.

The file opens offline in any browser: no CDN, no fonts, no requests. Charts are inline SVG and
canvas drawn by the page's own small script (``assets/*.js``).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from pydantic import BaseModel

from envlab.core import ConfigError
from envlab.measure.runs import Run, load_run
from envlab.measure.summary import CIMethod
from envlab.report.data import build_report_data, to_json
from envlab.report.robustness import robustness_section
from envlab.report.training import training_section
from envlab.report.vet import is_vet_dir, vet_section

SCRIPTS = ("base.js", "charts.js", "viewer.js")
"""The page's script, in order; one function scope, so they share constants and helpers."""


class ReportInfo(BaseModel):
    """What ``envlab report --json`` prints."""

    out: str
    bytes: int
    runs: list[str]
    episodes: int
    tasks: int
    notes: list[str]


def _asset(name: str) -> str:
    return resources.files("envlab.report").joinpath("assets", name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """JSON text that cannot end its ``<script>`` element early: ``<`` only occurs inside JSON
    strings, where ``\\u003c`` means the same."""
    return text.replace("<", "\\u003c")


def render_report(
    runs: Sequence[Run],
    *,
    title: str | None = None,
    confidence: float = 0.95,
    ci_method: CIMethod = "clt",
    max_chars: int = 20_000,
    vet_dirs: Sequence[Path] = (),
) -> str:
    """The report's HTML for runs loaded with ``load_run(path, trajectories=True)``, and the
    verdicts of the ``envlab vet`` directories ``vet_dirs``."""
    for run in runs:
        if run.trajectories is None:
            raise ConfigError(f"{run.path}: load it with load_run(path, trajectories=True)")
    data, episodes = build_report_data(
        runs, title=title, confidence=confidence, ci_method=ci_method, max_chars=max_chars
    )
    parts = [
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{html.escape(str(data['title']))}</title>",
        f"<style>\n{_asset('report.css')}\n</style></head>\n<body>",
        "<noscript>This report draws its charts and viewer with JavaScript; enable it.</noscript>",
        vet_section(vet_dirs),
        *(training_section(run.path) for run in runs),
        robustness_section(run.path for run in runs),
        "<div id='app'></div>",
        f"<script type='application/json' id='envlab-data'>{_script_safe(to_json(data))}</script>",
    ]
    for i, lines in enumerate(episodes):
        parts.append(
            f"<script type='application/x-ndjson' id='envlab-episodes-{i}'>"
            f"{_script_safe(lines)}</script>"
        )
    code = "\n".join(_asset(name) for name in SCRIPTS)
    parts.append(f'<script>\n(function () {{\n"use strict";\n{code}\n}})();\n</script>')
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(
    run_dirs: Sequence[str | Path],
    out: str | Path,
    *,
    title: str | None = None,
    confidence: float = 0.95,
    ci_method: CIMethod = "clt",
    max_chars: int = 20_000,
) -> ReportInfo:
    """Load run directories and write their report to ``out`` (an ``.html`` file). A directory
    written by ``envlab vet`` (it holds ``vet.json``) is drawn as a row of the vetting section."""
    out_path = Path(out)
    if out_path.is_dir():
        raise ConfigError(
            f"--out {out_path} is a directory; name a file, e.g. {out_path}/report.html"
        )
    if not run_dirs:
        raise ConfigError("name at least one run directory: envlab report RUN... --out FILE.html")
    vets = [Path(p) for p in run_dirs if is_vet_dir(Path(p))]
    runs = [load_run(p, trajectories=True) for p in run_dirs if Path(p) not in vets]
    text = render_report(
        runs, title=title, confidence=confidence, ci_method=ci_method, max_chars=max_chars,
        vet_dirs=vets,
    )  # fmt: skip
    out_path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    out_path.write_bytes(data)
    return ReportInfo(
        out=str(out_path),
        bytes=len(data),
        runs=[str(r.path) for r in runs],
        episodes=sum(len(r.records) for r in runs),
        tasks=len({r.task_id for run in runs for r in run.records}),
        notes=[n for r in runs for n in r.notes],
    )
