"""The robustness section of a report, for runs written by ``envlab robustness``: per
perturbation the paired drop from the clean run with its interval, the faults injected, the
safety-gate trips clean vs perturbed, the exclusions, and a chart (a PNG, inlined).

``envlab robustness`` writes ``DIR/robustness.json`` (a :class:`Robustness`), the charts in
``DIR/charts/`` and the runs in ``DIR/clean``, ``DIR/<perturbation>``; a report of any of those
runs (``envlab report DIR/clean DIR/stale ...``) shows the section once. Plain HTML, drawn
without the page's script.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

ROBUSTNESS_FILE = "robustness.json"
CHARTS_DIR = "charts"
OVERVIEW_CHART = "robustness.png"
"""The drop of every perturbation with its interval, in one chart (``DIR/robustness.png``)."""
NO_MATPLOTLIB = (
    "no charts: matplotlib is not installed (it comes with the train extra: "
    "pip install 'envlab[train]'); the numbers are in robustness.json"
)


class RunSide(BaseModel):
    """One run of a robustness measurement: the clean run or a perturbed one."""

    run_dir: str
    env_hash: str
    n_episodes: int
    n_scored: int
    mean: float | None
    low: float | None = None
    high: float | None = None
    excluded: dict[str, int] = Field(default_factory=dict)
    """Episodes left out of the scores, by status (``infra_error``, ``env_error``)."""
    model_failed: int = 0
    """Episodes the agent's model endpoint failed (scored 0, or excluded by the run's policy)."""
    gates: dict[str, int] = Field(default_factory=dict)
    """Episodes whose reward a safety gate zeroed, by gate (``gated_by``)."""
    faults: int = 0
    """Faults injected in all (``info["faults"]`` of every step)."""
    episodes_with_faults: int = 0
    faults_by_tool: dict[str, int] = Field(default_factory=dict)


class PerturbationResult(BaseModel):
    """One perturbation, alone, against the clean run on the same tasks and seeds."""

    name: str
    """Its run's directory name under ``DIR``."""
    perturbation: str
    """``p.describe()``: ``stale=0.3``."""
    run: RunSide
    n_shared: int = 0
    """Tasks scored in both runs (the paired drop is over them)."""
    drop: float | None = None
    """``clean - perturbed``, the mean over shared tasks, in reward units."""
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    test: str | None = None
    significant: bool | None = None
    scale: float = 1.0
    """100 when rewards lie in [0, 1] (a drop in points), else 1."""
    unit: str = ""
    verdict: str = ""
    chart: str | None = None
    """Its chart, relative to ``DIR``."""
    notes: list[str] = Field(default_factory=list)


class Robustness(BaseModel):
    """``robustness.json``: what ``envlab robustness`` measured."""

    env: str
    agent: str
    privileged: bool
    seed: int
    split: str
    n_tasks: int
    samples: int
    confidence: float
    clean: RunSide
    perturbations: list[PerturbationResult]
    chart: str | None = None
    """The overview chart, relative to ``DIR``."""
    notes: list[str] = Field(default_factory=list)


def read_robustness(out_dir: Path) -> Robustness | None:
    """``DIR/robustness.json``, or ``None`` when there is none (or it is not one)."""
    path = out_dir / ROBUSTNESS_FILE
    if not path.is_file():
        return None
    try:
        return Robustness.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


# --- charts -------------------------------------------------------------------------------


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or ``None`` when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_charts(result: Robustness, out_dir: Path) -> str | None:
    """Draw the overview and one chart per perturbation under ``out_dir`` and set their paths
    in ``result``; the reason when none can be drawn (matplotlib missing), else ``None``."""
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    (out_dir / CHARTS_DIR).mkdir(parents=True, exist_ok=True)
    for p in result.perturbations:
        rel = f"{CHARTS_DIR}/{p.name}.png"
        _perturbation_chart(plt, result, p, out_dir / rel)
        p.chart = rel
    if result.perturbations:
        _overview_chart(plt, result, out_dir / OVERVIEW_CHART)
        result.chart = OVERVIEW_CHART
    return None


def _whisker(mean: float | None, low: float | None, high: float | None) -> list[float]:
    if mean is None or low is None or high is None:
        return [0.0, 0.0]
    return [max(mean - low, 0.0), max(high - mean, 0.0)]


def _perturbation_chart(plt: Any, result: Robustness, p: PerturbationResult, path: Path) -> None:
    """Left: mean reward clean vs perturbed with their intervals; right: gate trips by gate."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    sides = [("clean", result.clean), (p.perturbation, p.run)]
    means = [s.mean or 0.0 for _, s in sides]
    err = list(zip(*(_whisker(s.mean, s.low, s.high) for _, s in sides), strict=True))
    ax1.bar([0, 1], means, yerr=err, capsize=6, color=["#1f4e9c", "#c0504d"], width=0.55)
    ax1.set_xticks([0, 1], [name for name, _ in sides])
    ax1.set_ylabel(f"mean reward ({result.confidence:.0%} CI)")
    ax1.set_title(_drop_text(p), fontsize=9)
    gates = sorted(set(result.clean.gates) | set(p.run.gates))
    if gates:
        y = range(len(gates))
        ax2.barh([i + 0.2 for i in y], [result.clean.gates.get(g, 0) for g in gates], 0.4,
                 color="#1f4e9c", label="clean")  # fmt: skip
        ax2.barh([i - 0.2 for i in y], [p.run.gates.get(g, 0) for g in gates], 0.4,
                 color="#c0504d", label=p.perturbation)  # fmt: skip
        ax2.set_yticks(list(y), gates, fontsize=8)
        ax2.legend(fontsize=8)
    else:
        ax2.text(0.5, 0.5, "no safety gate tripped", ha="center", va="center")
        ax2.set_yticks([])
    ax2.set_xlabel("episodes gated (safety-gate trips)")
    ax2.set_title(f"{p.run.faults} faults in {p.run.episodes_with_faults} episodes", fontsize=9)
    fig.suptitle(f"{result.env} / {result.agent}: {p.perturbation}", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _overview_chart(plt: Any, result: Robustness, path: Path) -> None:
    rows = result.perturbations
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.4), constrained_layout=True)
    for i, p in enumerate(rows):
        if p.drop is None:
            continue
        scale = p.scale
        err = [[x * scale] for x in _whisker(p.drop, p.low, p.high)]
        ax.errorbar([p.drop * scale], [i], xerr=err, fmt="o", color="#c0504d", capsize=5)
    ax.axvline(0, color="#888", lw=1)
    ax.set_yticks(range(len(rows)), [p.perturbation for p in rows])
    ax.invert_yaxis()
    unit = rows[0].unit or "reward"
    ax.set_xlabel(f"drop from clean, {unit} ({result.confidence:.0%} CI)")
    ax.set_title(f"{result.env} / {result.agent}: robustness", fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def in_units(x: float | None, r: PerturbationResult) -> str:
    """A drop (or its bound) as shown: in points when rewards lie in [0, 1]."""
    if x is None:
        return "-"
    v = x * r.scale + 0.0  # no "-0.0"
    return f"{v:.1f}" if r.unit == "points" else f"{v:.3g}"


def p_text(p: float) -> str:
    return f"{p:.1e}" if p < 1e-4 else f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def drop_verdict(r: PerturbationResult, confidence: float, *, identical: bool = False) -> str:
    """One sentence: the drop with its interval, and whether the test tells it from none."""
    unit = f" {r.unit}" if r.unit else ""
    if r.drop is None:
        return r.verdict
    if r.low is None or r.high is None or r.p_value is None:
        return (
            f"one shared task: drop {in_units(r.drop, r)}{unit}; one task cannot estimate "
            "uncertainty, measure on more tasks (--tasks)"
        )
    ci = f"{confidence:.0%} CI {in_units(r.low, r)} to {in_units(r.high, r)}"
    drop = f"drop {in_units(r.drop, r)}{unit} ({ci})"
    how = f"p = {p_text(r.p_value)}, {r.test}, {r.n_shared} tasks"
    if r.significant and r.drop > 0:
        return f"lowers the reward: {drop}, {how}"
    if r.significant and r.drop < 0:
        return f"raises the reward: {drop}, {how}"
    if identical:
        return f"no drop: clean and perturbed scored the same on all {r.n_shared} tasks"
    if r.low > 0 or r.high < 0:
        return f"{drop}, but the test does not tell it from none ({how}); measure on more tasks"
    return f"no detectable drop: {drop}, {how}"


# --- the section --------------------------------------------------------------------------


def _esc(x: object) -> str:
    return html.escape(str(x))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _drop_text(p: PerturbationResult) -> str:
    if p.drop is None:
        return "no paired drop"
    ci = "" if p.low is None else f" (CI {in_units(p.low, p)} to {in_units(p.high, p)})"
    return f"drop {in_units(p.drop, p)} {p.unit}".rstrip() + ci


def _counts(c: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def _gate_cell(clean: dict[str, int], pert: dict[str, int]) -> str:
    gates = sorted(set(clean) | set(pert))
    return "; ".join(f"{g}: {clean.get(g, 0)} &rarr; {pert.get(g, 0)}" for g in gates) or "none"


def _img(out_dir: Path, rel: str | None, alt: str) -> str:
    if rel is None or not (out_dir / rel).is_file():
        return ""
    data = base64.b64encode((out_dir / rel).read_bytes()).decode()
    return f"<img alt='{_esc(alt)}' src='data:image/png;base64,{data}' style='max-width:100%'>"


def _table(r: Robustness) -> str:
    pct = f"{r.confidence:.0%}"
    head = (
        "<tr><th>perturbation</th><th>faults (episodes)</th><th>clean mean</th>"
        f"<th>perturbed mean</th><th>drop ({pct} CI)</th><th>p</th><th>tasks</th>"
        "<th>safety-gate trips, clean &rarr; perturbed</th>"
        "<th>excluded, clean / perturbed</th></tr>"
    )
    rows = [head]
    for p in r.perturbations:
        ci = "" if p.low is None else f" ({in_units(p.low, p)} to {in_units(p.high, p)})"
        rows.append(
            f"<tr><td>{_esc(p.perturbation)}</td>"
            f"<td>{p.run.faults} ({p.run.episodes_with_faults})</td>"
            f"<td>{_num(r.clean.mean)}</td><td>{_num(p.run.mean)}</td>"
            f"<td>{in_units(p.drop, p)} {_esc(p.unit)}{ci}</td>"
            f"<td>{'-' if p.p_value is None else p_text(p.p_value)}</td><td>{p.n_shared}</td>"
            f"<td>{_gate_cell(r.clean.gates, p.run.gates)}</td>"
            f"<td>{_esc(_counts(r.clean.excluded))} / {_esc(_counts(p.run.excluded))}</td></tr>"
        )
    return f"<table>{''.join(rows)}</table>"


def robustness_html(r: Robustness, out_dir: Path) -> str:
    """The section of one ``envlab robustness`` directory."""
    who = f"{r.agent} (privileged: a check of the environment)" if r.privileged else r.agent
    parts = [
        f"<section class='robustness'><h2>robustness: {_esc(r.env)} / {_esc(who)}</h2>",
        f"<p>{r.n_tasks} tasks of split {_esc(r.split)}, {r.samples} sample(s) each, seed "
        f"{r.seed}; each perturbation alone against the clean run, paired by task.</p>",
        _table(r),
        _img(out_dir, r.chart, "robustness: the drop of every perturbation"),
    ]
    for p in r.perturbations:
        parts.append(f"<h3>{_esc(p.perturbation)}</h3><p>{_esc(p.verdict)}</p>")
        parts.append(_img(out_dir, p.chart, f"robustness: {p.perturbation}"))
        parts.extend(f"<p class='note'>{_esc(n)}</p>" for n in p.notes)
    parts.extend(f"<p class='note'>{_esc(n)}</p>" for n in r.notes)
    parts.append("</section>")
    return "".join(parts)


def robustness_section(run_dirs: Iterable[Path]) -> str:
    """The section of each ``envlab robustness`` directory one of the runs belongs to (its
    ``clean`` run or a perturbed one), each once; ``""`` when none does."""
    seen: set[Path] = set()
    parts = []
    for run_dir in run_dirs:
        out_dir = run_dir.parent
        if out_dir.resolve() in seen:
            continue
        result = read_robustness(out_dir)
        if result is None or run_dir.name not in {"clean", *(p.name for p in result.perturbations)}:
            continue
        seen.add(out_dir.resolve())
        parts.append(robustness_html(result, out_dir))
    return "".join(parts)
