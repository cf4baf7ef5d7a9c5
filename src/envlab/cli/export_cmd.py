"""``envlab export RUN --format sft|dpo|grpo|tokens|verl --out FILE`` and ``... --check``.

Registered by ``envlab.cli.main``: ``app.command("export")(export_cmd)``. The export package,
rich, pyarrow and any tokenizer are imported when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import err, out

if TYPE_CHECKING:
    from envlab.export import DriftReport, ExportOptions, ExportReport, Renderer


def export_cmd(
    run: Annotated[Path, typer.Argument(metavar="RUN", help="Run directory (envlab eval --out).")],
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", metavar="sft|dpo|grpo|tokens|verl", help="What to export."),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="FILE.jsonl or FILE.parquet."),
    ] = None,
    check: Annotated[
        bool,
        typer.Option("--check", help="Report the token drift of the run; export nothing."),
    ] = False,
    min_reward: Annotated[
        float, typer.Option("--min-reward", help="sft: the least reward exported.")
    ] = 1.0,
    all_passing: Annotated[
        bool,
        typer.Option("--all-passing", help="sft: every episode at or above --min-reward."),
    ] = False,
    min_margin: Annotated[
        float, typer.Option("--min-margin", help="dpo: least reward gap chosen - rejected.")
    ] = 0.5,
    eps: Annotated[
        float, typer.Option("--eps", help="grpo/tokens: advantage = (r - mean) / (std + eps).")
    ] = 1e-6,
    drop_dead: Annotated[
        bool,
        typer.Option(
            "--drop-dead", help="grpo/tokens/verl: leave out groups with no reward variance."
        ),
    ] = False,
    mark_drift: Annotated[
        bool,
        typer.Option("--mark-drift", help="tokens: export drifted episodes, marked, not refuse."),
    ] = False,
    no_check: Annotated[
        bool, typer.Option("--no-check", help="tokens: trust the token views unchecked.")
    ] = False,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            metavar="embedded|DIR",
            help="The model's tokenizer and chat template (default: embedded for smollm2 runs).",
        ),
    ] = None,
    as_json: O.JsonOption = False,
) -> None:
    """Export a run's episodes for a trainer (TRL, verl, slime/Miles, SkyRL), or check its
    token views. Unscored episodes (infra/env errors) are dropped and counted, never scored 0;
    an export with no row writes no file and exits 2, saying why."""
    from envlab.core import ConfigError
    from envlab.runs import RunDir

    rd = RunDir(run)
    if check:
        _check(rd, tokenizer, as_json)
        return
    if fmt is None or out_file is None:
        raise ConfigError("give --format sft|dpo|grpo|tokens|verl and --out FILE (or --check)")
    from envlab.export import export_run

    options = _options(
        fmt, min_reward, all_passing, min_margin, eps, drop_dead, mark_drift, no_check
    )
    report = export_run(rd, out_file, options, _renderer(rd, tokenizer, options))
    if as_json:
        out().print_json(json.dumps(report.to_dict()))
    else:
        out().print(_export_table(report))
    for note in rd.notes:
        err().print(f"[yellow]note:[/] {note}")


def _renderer(rd: object, tokenizer: str | None, options: ExportOptions) -> Renderer | None:
    """The model's renderer: required to check a ``tokens`` export; else (``grpo``, ``tokens``
    with --no-check) loaded when one is at hand, for ``prompt_text``."""
    from envlab.export import renderer_for, view_kind
    from envlab.runs import RunDir

    assert isinstance(rd, RunDir)
    if options.format == "tokens" and options.drift != "off":
        return renderer_for(rd, tokenizer)
    at_hand = tokenizer is not None or view_kind(rd.info.agent) == "engine"
    if options.format in ("tokens", "grpo") and at_hand:
        return renderer_for(rd, tokenizer)
    return None


def _options(
    fmt: str,
    min_reward: float,
    all_passing: bool,
    min_margin: float,
    eps: float,
    drop_dead: bool,
    mark_drift: bool,
    no_check: bool,
) -> ExportOptions:
    from envlab.core import ConfigError
    from envlab.export import FORMATS, ExportOptions

    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if mark_drift and no_check:
        raise ConfigError("--mark-drift and --no-check contradict each other: pick one")
    if eps < 0 or min_margin < 0:
        raise ConfigError(f"--eps and --min-margin must be >= 0, got {eps} and {min_margin}")
    return ExportOptions(
        format=fmt,  # type: ignore[arg-type]
        min_reward=min_reward,
        best_per_group=not all_passing,
        min_margin=min_margin,
        eps=eps,
        drop_dead=drop_dead,
        drift="off" if no_check else "mark" if mark_drift else "refuse",
    )


def _check(rd: object, tokenizer: str | None, as_json: bool) -> None:
    from envlab.export import check_run, renderer_for
    from envlab.runs import RunDir

    assert isinstance(rd, RunDir)
    report = check_run(rd, renderer_for(rd, tokenizer))
    if as_json:
        out().print_json(json.dumps(report.to_dict()))
    else:
        out().print(_check_table(report))
        for d in report.drifts:
            err().print(f"[red]drift:[/] {d.describe()}")
    if report.drifts:
        raise typer.Exit(1)


def _export_table(r: ExportReport) -> object:
    from rich.table import Table

    t = Table(title=f"export {r.format} -> {r.out}")
    t.add_column("")
    t.add_column("count", justify="right")
    t.add_row("episodes in the run", str(r.n_episodes))
    t.add_row("rows exported", str(r.n_rows))
    t.add_row("dropped: not scored (infra/env errors)", str(sum(r.unscored.values())))
    for status, n in sorted(r.unscored.items()):
        t.add_row(f"  {status}", str(n))
    t.add_row("groups (dead: no reward variance)", f"{r.n_groups} ({r.dead_groups})")
    for why, n in sorted(r.skipped.items()):
        t.add_row(f"not exported: {why}", str(n))
    if r.checked:
        t.add_row("token views checked (marked drifted)", f"{r.checked} ({len(r.drifts)})")
    return t


def _check_table(r: DriftReport) -> object:
    from rich.table import Table

    t = Table(title=f"token-exactness check ({r.renderer})")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row("episodes", str(r.n_episodes))
    t.add_row("not scored (not checked)", str(r.n_unscored))
    t.add_row("no token view (not checked)", str(r.n_no_tokens))
    t.add_row("checked episodes (model turns)", f"{r.n_checked} ({r.n_turns})")
    t.add_row("drifted episodes", str(len(r.drifts)))
    rate = "-" if r.drift_rate is None else f"{r.drift_rate:.1%}"
    t.add_row("drift rate", rate)
    return t
