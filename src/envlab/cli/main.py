"""``envlab``: eval, vet, compare, report, task, ... Every command prints a table, or JSON with
``--json``.

Only typer is imported to build the command line: every command imports what it needs when it
runs, so ``envlab --help`` stays fast (no rich, numpy, scipy or engine).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.arena_cmd import arena_cmd
from envlab.cli.console import run_app
from envlab.cli.eval_cmd import eval_cmd
from envlab.cli.export_cmd import export_cmd
from envlab.cli.gc import gc_cmd
from envlab.cli.logs_cmd import logs_from_run_cmd, sim_from_logs_cmd
from envlab.cli.measure_cmds import compare_cmd, report_cmd
from envlab.cli.robustness_cmd import robustness_cmd
from envlab.cli.serve_cmd import serve_cmd
from envlab.cli.serve_model import serve_model_cmd
from envlab.cli.task import task_app
from envlab.cli.tour_cmd import tour_cmd
from envlab.cli.train_cmd import train_cmd
from envlab.cli.vet_cmds import vet_cmd

if TYPE_CHECKING:
    from envlab.core.registry import Registry

app = typer.Typer(
    help="envlab: build, vet, measure and train on environments for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from envlab import __version__

        typer.echo(f"envlab {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print envlab's version and exit."
        ),
    ] = False,
) -> None:
    """envlab: build, vet, measure and train on environments for LLM agents."""


@app.command("envs")
def envs_cmd(as_json: O.JsonOption = False) -> None:
    """List the environments found through the envlab.envs entry points."""
    from envlab.envs import ENVS

    _print_rows(_registry_rows(ENVS), as_json, "environments")


@app.command("agents")
def agents_cmd(
    as_json: O.JsonOption = False,
) -> None:
    """List the agents found through the envlab.agents entry points."""
    from envlab.agents import AGENTS

    _print_rows(_registry_rows(AGENTS), as_json, "agents")


def _registry_rows(registry: Registry) -> list[dict[str, str]]:
    """One row per plug-in: its ``description``, else the first line of its docstring."""
    from envlab.core.errors import EnvlabError

    rows = []
    for e in registry.entries():
        try:
            factory = registry.resolve(e.name)
            desc = getattr(factory, "description", "") or (factory.__doc__ or "").strip()
            desc = desc.split("\n")[0]
        except EnvlabError as ex:
            desc = f"(cannot load: {ex})"
        rows.append({"name": e.name, "target": e.target, "package": e.source, "description": desc})
    return rows


def _print_rows(rows: list[dict[str, str]], as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    from envlab.cli.console import out

    table = Table(title=title)
    for col in ("name", "description", "target"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["description"], r["target"])
    out().print(table)


app.command("tour")(tour_cmd)
app.command("eval")(eval_cmd)
app.command("compare")(compare_cmd)
app.command("report")(report_cmd)
app.command("vet")(vet_cmd)
app.add_typer(task_app, name="task")
app.command("serve")(serve_cmd)
app.command("serve-model")(serve_model_cmd)
app.command("arena")(arena_cmd)
app.command("gc")(gc_cmd)
app.command("export")(export_cmd)
app.command("train")(train_cmd)
app.command("logs-from-run")(logs_from_run_cmd)
app.command("sim-from-logs")(sim_from_logs_cmd)
app.command("robustness")(robustness_cmd)


def main() -> None:
    run_app(app)


if __name__ == "__main__":
    main()
