"""``envlab logs-from-run RUN --out LOGS.jsonl`` and ``envlab sim-from-logs LOGS.jsonl --out DIR``:
any envlab run as logs (docs/logs.md), and logs as an environment ``envlab eval DIR`` runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from envlab.cli import options as O


def _print(rows: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    from envlab.cli.console import out

    table = Table(title=title)
    table.add_column("")
    table.add_column("value")
    for k, v in rows.items():
        table.add_row(k, ", ".join(map(str, v)) if isinstance(v, list) else str(v))
    out().print(table)


def logs_from_run_cmd(
    run: Annotated[
        Path, typer.Argument(metavar="RUN", help="A run directory (envlab eval --out).")
    ],
    out_file: Annotated[
        Path, typer.Option("--out", "-o", metavar="LOGS.jsonl", help="The log file to write.")
    ],
    writes: Annotated[
        str | None,
        typer.Option(
            "--writes",
            metavar="TOOL,TOOL",
            help="The tools that write (default: from the run's environment).",
        ),
    ] = None,
    pass_threshold: Annotated[
        float, typer.Option("--pass-threshold", help="Reward counted as a successful session.")
    ] = 1.0,
    as_json: O.JsonOption = False,
) -> None:
    """Write the episodes of RUN as logged sessions, one JSON object a line (docs/logs.md)."""
    from envlab.envs.replay import logs_from_run, write_logs

    names = [w.strip() for w in writes.split(",") if w.strip()] if writes is not None else None
    converted = logs_from_run(run, writes=names, pass_threshold=pass_threshold)
    n = write_logs(converted.sessions, out_file)
    rows = {
        "sessions": n,
        "successful": sum(s.outcome.success for s in converted.sessions),
        "writes": converted.writes,
        "writes from": converted.writes_from,
        "left out": converted.skipped or "none",
        "out": str(out_file),
    }
    _print(rows, as_json, f"logs from {run}")


def sim_from_logs_cmd(
    logs: Annotated[Path, typer.Argument(metavar="LOGS.jsonl", help="Logged sessions.")],
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="The replay environment to write.")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="The environment's name (default replay-DIR).")
    ] = None,
    as_json: O.JsonOption = False,
) -> None:
    """Build a replay environment from logged sessions: `envlab eval DIR --agent ...` runs it."""
    from envlab.envs.replay import build_sim

    manifest = build_sim(logs, out_dir, name=name)
    rows = {
        "name": manifest.name,
        "sessions": manifest.sessions,
        "tasks": manifest.tasks,
        "tools": manifest.tools,
        "writes": manifest.writes,
        "out": str(out_dir),
        "run it": f"envlab eval {out_dir} --agent AGENT",
    }
    _print(rows, as_json, f"replay environment from {logs}")
