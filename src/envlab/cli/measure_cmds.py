"""``envlab compare`` and ``envlab report``.

Registered by ``envlab.cli.main``: ``app.command("compare")(compare_cmd)`` and
``app.command("report")(report_cmd)``. Heavy imports (rich, numpy, scipy) happen inside the
commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import err, out

if TYPE_CHECKING:
    from rich.table import Table

    from envlab.measure.compare import Comparison


def _check_level(name: str, value: float) -> None:
    from envlab.core.errors import ConfigError

    if not 0.0 < value < 1.0:
        raise ConfigError(f"{name} must be between 0 and 1 (e.g. 0.95), got {value}")


def compare_cmd(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="Run directory A, the baseline.")],
    run_b: Annotated[
        Path, typer.Argument(metavar="RUN_B", help="Run directory B, compared against A.")
    ],
    as_json: O.JsonOption = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Compare even if the environment content hashes differ."),
    ] = False,
    confidence: O.ConfidenceOption = 0.95,
    target: Annotated[
        float | None,
        typer.Option(
            "--target",
            help="Difference to plan for, in points (rewards in [0, 1]) or reward units; "
            "default: the difference seen.",
        ),
    ] = None,
    power: Annotated[
        float, typer.Option("--power", help="Power for the tasks-needed estimate.")
    ] = 0.8,
) -> None:
    """Compare run B against run A on the tasks both ran: paired difference, CI, p-value."""
    from envlab.measure.compare import compare_runs
    from envlab.measure.runs import load_run

    _check_level("--confidence", confidence)
    _check_level("--power", power)
    if target is not None and target <= 0:
        from envlab.core.errors import ConfigError

        raise ConfigError(f"--target must be > 0, got {target}")
    a, b = load_run(run_a), load_run(run_b)
    cmp = compare_runs(a, b, confidence=confidence, power=power, force=force)
    if target is not None:  # given in the verdict's units: points when rewards lie in [0, 1]
        cmp = compare_runs(
            a, b, confidence=confidence, power=power, force=force, target=target / cmp.scale
        )
    if as_json:
        out().print_json(cmp.model_dump_json())
        return
    for table in comparison_tables(cmp):
        out().print(table)
    out().print(f"[bold]{cmp.verdict}[/]")
    for note in cmp.notes:
        err().print(f"[yellow]note:[/] {note}")


def comparison_tables(cmp: Comparison) -> tuple[Table, Table]:
    """The comparison for people: the two runs side by side, then the paired numbers."""
    from rich.table import Table

    p, sc = cmp.paired, cmp.scale
    digits = 1 if cmp.unit == "points" else 3

    def num(x: float | None, sign: bool = False) -> str:
        if x is None:
            return "-"
        return f"{x * sc:+.{digits}f}" if sign else f"{x * sc:.{digits}f}"

    unit = f" ({cmp.unit})" if cmp.unit else ""
    runs = Table(title=f"{cmp.a.env_id}: B against A")
    runs.add_column("")
    runs.add_column("A", justify="right")
    runs.add_column("B", justify="right")
    runs.add_row("run", cmp.a.path, cmp.b.path)
    runs.add_row("agent", cmp.a.agent, cmp.b.agent)
    runs.add_row("environment hash", cmp.a.env_hash, cmp.b.env_hash)
    runs.add_row("tasks (only in this run)", f"{cmp.a.n_tasks} ({cmp.n_only_a})",
                 f"{cmp.b.n_tasks} ({cmp.n_only_b})")  # fmt: skip
    runs.add_row("samples per task", f"{cmp.a.samples:g}", f"{cmp.b.samples:g}")
    runs.add_row(f"mean on shared tasks{unit}", num(p.mean_a), num(p.mean_b))
    pct = f"{cmp.confidence * 100:g}%"
    paired = Table(title=f"paired over {cmp.n_shared} shared tasks")
    paired.add_column("")
    paired.add_column("value", justify="right")
    paired.add_row(f"B - A{unit}", num(p.diff, sign=True))
    paired.add_row(
        f"{pct} CI", "-" if p.low is None else f"{num(p.low, True)} to {num(p.high, True)}"
    )
    paired.add_row(f"p-value ({cmp.test})", "-" if cmp.p_value is None else f"{cmp.p_value:.3g}")
    if cmp.mcnemar is not None:
        m = cmp.mcnemar
        paired.add_row("paired t p-value", "-" if p.p_value is None else f"{p.p_value:.3g}")
        paired.add_row("tasks only A passed / only B passed", f"{m.a_only} / {m.b_only}")
    paired.add_row("SE paired (unpaired)", f"{num(p.se)} ({num(p.se_unpaired)})")
    if p.correlation is not None:
        paired.add_row("correlation of A and B across tasks", f"{p.correlation:.2f}")
    if cmp.min_detectable is not None:
        paired.add_row(f"detectable with {cmp.power:.0%} power", num(cmp.min_detectable))
    if cmp.target is not None and cmp.tasks_needed is not None:
        paired.add_row(f"tasks needed to detect {num(cmp.target)}", str(cmp.tasks_needed))
        if cmp.variance and "within" in cmp.variance:
            k = "no number" if cmp.samples_needed is None else str(cmp.samples_needed)
            paired.add_row(f"samples per task needed on {cmp.n_shared} tasks", k)
    if cmp.n_unscored:
        paired.add_row("shared tasks left out (not scored in both)", str(cmp.n_unscored))
    return runs, paired


def report_cmd(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN", help="One or more run directories.")],
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="The HTML file to write (one self-contained file).")
    ],
    title: Annotated[str | None, typer.Option("--title", help="Title of the report.")] = None,
    confidence: O.ConfidenceOption = 0.95,
    bootstrap: Annotated[
        bool, typer.Option("--bootstrap", help="Bootstrap the intervals (resampling tasks).")
    ] = False,
    max_chars: Annotated[
        int,
        typer.Option("--max-chars", help="Longest text kept per message; the rest is cut."),
    ] = 20_000,
    as_json: O.JsonOption = False,
) -> None:
    """Write one self-contained HTML report of RUNS: CIs, curves, heatmap, trajectory viewer."""
    from envlab.report import write_report

    _check_level("--confidence", confidence)
    info = write_report(
        runs,
        out_file,
        title=title,
        confidence=confidence,
        ci_method="bootstrap" if bootstrap else "clt",
        max_chars=max_chars,
    )
    if as_json:
        out().print_json(info.model_dump_json())
        return
    for note in info.notes:
        err().print(f"[yellow]note:[/] {note}")
    size = info.bytes / 1e6
    out().print(
        f"wrote {info.out} ({size:.1f} MB): {len(info.runs)} run(s), {info.tasks} tasks, "
        f"{info.episodes} episodes. Open it in a browser; it needs no network."
    )
