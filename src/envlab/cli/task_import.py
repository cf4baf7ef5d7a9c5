"""``envlab task import terminal-bench DIR``: Terminal-Bench 1 task folders as Harbor task folders.

The mapping is Harbor's (``envlab.importers.terminal_bench``); a task that cannot be mapped is
listed with the reason and leaves nothing behind. Exit status 1 when any task failed.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O

if TYPE_CHECKING:
    from envlab.importers.terminal_bench import ImportReport


class SourceKind(StrEnum):
    terminal_bench = "terminal-bench"


def import_cmd(
    kind: Annotated[
        SourceKind, typer.Argument(metavar="SOURCE", help="What the tasks are: terminal-bench.")
    ],
    path: Annotated[
        Path, typer.Argument(metavar="DIR", help="A TB1 task folder or a folder of them.")
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Where the task folders go.")
    ] = Path("harbor-tasks"),
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace task folders already in --out.")
    ] = False,
    as_json: O.JsonOption = False,
) -> None:
    """Convert the SOURCE tasks at DIR into Harbor task folders under --out (one per task)."""
    from envlab.importers.terminal_bench import import_terminal_bench

    report = import_terminal_bench(path, out_dir, overwrite=overwrite)
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        _print_report(report, kind)
    if report.failed:
        raise typer.Exit(1)


def _print_report(report: ImportReport, kind: SourceKind) -> None:
    from rich.markup import escape
    from rich.table import Table

    from envlab.cli.console import out

    table = Table(title=escape(f"envlab task import {kind.value} {report.source}"))
    for col in ("task", "result", "compose", "reason / notes"):
        table.add_column(col, overflow="fold")
    for t in report.tasks:
        table.add_row(
            escape(t.name),
            "[green]mapped[/]" if t.status == "mapped" else "[red]failed[/]",
            "yes" if t.compose else "",
            escape("\n".join([t.reason] if t.reason else t.notes)),
        )
    out().print(table)
    composed = sum(t.compose for t in report.mapped)
    out().print(
        f"{len(report.mapped)} mapped ({composed} with a docker-compose.yaml), "
        f"{len(report.failed)} failed -> {escape(report.dest)}",
        soft_wrap=True,
    )
