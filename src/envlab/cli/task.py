"""``envlab task run|check|build|import``: run an agent on task folders, self-check them, build
their images, import Terminal-Bench 1 tasks.

``check`` is the contract of a task folder: the oracle (``solution/solve.sh``) scores 1 on every
run and the no-op agent scores 0, with no infrastructure error. Anything else is a broken task.
Both run their episodes through the one driver (``envlab.rollout.run_episodes``) with the
limits each task declares (``spec.limits(task)``), under the user's overrides.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import out, run_app, run_async
from envlab.cli.options import ModelFailuresOption
from envlab.cli.task_build import build_cmd
from envlab.cli.task_import import import_cmd

if TYPE_CHECKING:
    from envlab.cli.progress import RunProgress
    from envlab.cli.task_runs import CheckRow, EpisodeRow

task_app = typer.Typer(
    help="Task folders (Harbor format): run an agent on them, or check them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _reward(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def _bar(enabled: bool, pass_rate: bool = True) -> RunProgress:
    """The progress bar (no pass rate for ``check``: its no-op runs are meant to fail)."""
    from envlab.cli.progress import RunProgress

    return RunProgress(enabled=enabled, pass_threshold=1.0 if pass_rate else None)


_SANDBOX = typer.Option("--sandbox", metavar="bwrap|local", help="Sandbox of the workspaces.")


@task_app.command("run")
def run_cmd(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="A task folder or a directory of them.")
    ],
    agent: Annotated[
        str,
        typer.Option(
            "--agent", "-a", metavar="AGENT", help="Agent name, or shell:FILE to run a script."
        ),
    ],
    samples: Annotated[int, typer.Option("--samples", "-k", help="Samples per task.")] = 1,
    concurrency: O.ConcurrencyOption = 4,
    max_retries: O.MaxRetriesOption = 1,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Steps per episode.")] = None,
    step_timeout: Annotated[
        float | None, typer.Option("--step-timeout", help="Seconds per step (default: none).")
    ] = None,
    episode_timeout: Annotated[
        float | None,
        typer.Option("--episode-timeout", help="Seconds per episode (default: task.toml's)."),
    ] = None,
    grade_timeout: Annotated[
        float | None,
        typer.Option("--grade-timeout", help="Seconds to grade (default: task.toml's)."),
    ] = None,
    sandbox: Annotated[str | None, _SANDBOX] = None,
    model_failures: ModelFailuresOption = "agent",
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    as_json: O.JsonOption = False,
) -> None:
    """Run AGENT on the task folder(s) at PATH; print reward and status per sample."""
    from envlab.cli.options import (
        check_model_failures,
        limit_overrides,
        open_agent,
        open_env,
    )
    from envlab.cli.task_runs import run_samples
    from envlab.core.errors import ConfigError
    from envlab.rollout.driver import check_backend

    if samples < 1 or concurrency < 1:
        raise ConfigError("--samples and --concurrency must be >= 1")
    check_backend(backend, address)
    overrides = limit_overrides(max_steps, step_timeout, episode_timeout, grade_timeout)
    spec = open_env(str(path), {}, sandbox)

    async def run() -> list[EpisodeRow]:
        factory = open_agent(agent, {})
        try:
            with _bar(not as_json) as bar:
                [rows] = await run_samples(
                    spec, [(factory, samples)], list(spec.tasks()), concurrency=concurrency,
                    max_retries=max_retries, overrides=overrides, progress=bar,
                    model_failures=check_model_failures(model_failures),
                    backend=backend, address=address,
                )  # fmt: skip
            return rows
        finally:
            await factory.aclose()

    rows = run_async(run())
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        _printrun_async(rows, f"{path} / {rows[0].agent if rows else agent}")
    if any(r.status in ("infra_error", "env_error") for r in rows):
        raise typer.Exit(1)


def _printrun_async(rows: list[EpisodeRow], title: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    for col in ("task", "sample", "status", "reward", "components", "seconds", "why"):
        table.add_column(col, overflow="fold")
    for r in rows:
        comps = ", ".join(f"{k}={v:g}" for k, v in r.components.items())
        table.add_row(
            r.task_id, str(r.sample), r.status, _reward(r.reward), comps,
            f"{r.duration_s:.2f}", escape(r.why()[:200]),
        )  # fmt: skip
    out().print(table)


@task_app.command("check")
def check_cmd(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="A task folder or a directory of them.")
    ],
    runs: Annotated[int, typer.Option("--runs", "-n", help="Oracle runs per task.")] = 5,
    noop_runs: Annotated[int, typer.Option("--noop-runs", help="No-op runs per task.")] = 1,
    concurrency: O.ConcurrencyOption = 4,
    sandbox: Annotated[str | None, _SANDBOX] = None,
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    as_json: O.JsonOption = False,
) -> None:
    """Check task folders: the oracle must score 1 on every run, the no-op agent 0."""
    from envlab.cli.task_runs import check
    from envlab.core.errors import ConfigError
    from envlab.rollout.driver import backend_session

    if runs < 1 or noop_runs < 1 or concurrency < 1:
        raise ConfigError("--runs, --noop-runs and --concurrency must be >= 1")

    async def run() -> list[CheckRow]:
        with (
            _bar(not as_json, pass_rate=False) as bar,
            backend_session(backend, address, concurrency),
        ):
            return await check(
                path, runs, noop_runs, concurrency, sandbox=sandbox, progress=bar,
                backend=backend, address=address,
            )  # fmt: skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # FROM notes are shown per task
        rows = run_async(run())
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
    else:
        _print_check(rows, f"envlab task check {path}")
    if not all(r.ok for r in rows):
        raise typer.Exit(1)


def _print_check(rows: list[CheckRow], title: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    for col in ("task", "result", "oracle", "noop", "problems / notes"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r.task_id,
            "[green]ok[/]" if r.ok else "[red]FAIL[/]",
            " ".join(_reward(e.reward) for e in r.oracle),
            " ".join(_reward(e.reward) for e in r.noop),
            escape("\n".join([*r.problems, *r.notes])),
        )
    out().print(table)


task_app.command("import")(import_cmd)
task_app.command("build")(build_cmd)


def main() -> None:
    """Run ``task_app`` on its own (``python -m envlab.cli.task``)."""
    run_app(task_app)


if __name__ == "__main__":
    main()
