"""``envlab vet``, and what ``envlab arena`` shares with it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envlab.cli import options as O
from envlab.cli.console import out, run_async

if TYPE_CHECKING:
    from envlab.vet.model import EnvVet
    from envlab.vet.runner import VetConfig

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "n/a": "dim"}
_VERDICT_STYLE = {
    "ok": "green",
    "quarantine": "bold red",
    "broken": "red",
    "trivial": "yellow",
    "dead": "magenta",
}


async def _vet_one(
    env_name: str,
    env_config: dict[str, Any],
    agent_name: str | None,
    out_dir: Path,
    cfg: VetConfig,
    sandbox: str | None,
    progress: bool,
    perturbations: str | None = None,
) -> EnvVet:
    """Vet one environment (with ``perturbations``, ``--perturb``'s text, on its tool calls)
    with the agent called ``agent_name`` (``none``: no agent), which is closed at the end."""
    from envlab.cli.options import open_agent, open_env, with_perturbations
    from envlab.cli.progress import RunProgress, VetProgress
    from envlab.vet.runner import vet_environment

    spec = with_perturbations(open_env(env_name, env_config, sandbox), perturbations)
    factory = None
    if agent_name is not None and agent_name.lower() != "none":
        factory = open_agent(agent_name, {})
    bar = RunProgress(description=f"vet {spec.name}", pass_threshold=None, enabled=progress)
    try:
        with bar:
            return await vet_environment(
                spec, out_dir=out_dir, agent=factory, config=cfg, observer=VetProgress(bar)
            )
    finally:
        if factory is not None:
            await factory.aclose()


def _config(
    samples: int,
    oracle_runs: int,
    group_size: int,
    concurrency: int,
    tasks: int | None,
    backend: str = "local",
    address: str | None = None,
) -> VetConfig:
    from envlab.core.errors import ConfigError
    from envlab.rollout.driver import check_backend
    from envlab.vet.runner import VetConfig

    check_backend(backend, address)
    if samples < 2:
        raise ConfigError(f"--samples must be >= 2 to see a group's spread, got {samples}")
    if oracle_runs < 1:
        raise ConfigError(f"--oracle-runs must be >= 1, got {oracle_runs}")
    return VetConfig(
        oracle_runs=oracle_runs,
        samples=samples,
        group_size=group_size,
        concurrency=concurrency,
        tasks=tasks,
        backend=backend,
        address=address,
    )


_SANDBOX = typer.Option("--sandbox", metavar="bwrap|local", help="Sandbox of task folders.")
_PERTURB_HELP = (
    "Vet the environment with seeded faults on its tool calls (as `envlab eval --perturb`), "
    "e.g. transient=0.2 (docs/robustness.md)."
)


def vet_cmd(
    env: Annotated[
        str,
        typer.Argument(
            metavar="ENV", help="Environment: a name, module:Class, file.py:Class or a task folder."
        ),
    ],
    agent: Annotated[
        str, typer.Option("--agent", "-a", help="Agent of the trainability check ('none' to skip).")
    ] = "smollm2",
    samples: Annotated[
        int, typer.Option("--samples", "-k", help="Agent samples per task (G).")
    ] = 4,
    oracle_runs: Annotated[
        int, typer.Option("--oracle-runs", help="M: fresh oracle runs and re-grades.")
    ] = 5,
    group_size: Annotated[
        int, typer.Option("--group-size", help="The trainer's G for P(dead group).")
    ] = 8,
    concurrency: O.ConcurrencyOption = 2,
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    tasks: Annotated[
        int | None, typer.Option("--tasks", "-n", help="Vet only the first N tasks.")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="DIR", help="Vet directory.")
    ] = None,
    sandbox: Annotated[str | None, _SANDBOX] = None,
    env_arg: O.EnvArgOption = None,
    perturb: Annotated[
        str | None, typer.Option("--perturb", metavar="NAME=VALUE,...", help=_PERTURB_HELP)
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when any task's verdict is not ok (for CI).")
    ] = False,
    as_json: O.JsonOption = False,
) -> None:
    """Vet ENV: catch leaking, hackable, broken, trivial and dead tasks; write vet.json."""
    from envlab.cli.options import parse_kv
    from envlab.cli.run_dirs import default_out_dir

    cfg = _config(samples, oracle_runs, group_size, concurrency, tasks, backend, address)
    env_config = parse_kv(env_arg or [], "--env-arg")
    out_dir = out_dir or default_out_dir("vet", env)
    report = run_async(
        _vet_one(env, env_config, agent, out_dir, cfg, sandbox, not as_json, perturb)
    )
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        print_report(report, out_dir)
    flagged = {k: v for k, v in report.verdict_counts.items() if k != "ok" and v}
    if strict and flagged:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(flagged.items()))
        typer.echo(f"--strict: {counts} of {len(report.tasks)} tasks are not ok", err=True)
        raise typer.Exit(1)


def print_report(report, out_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from envlab.vet.model import CHECKS

    names = list(CHECKS)
    table = Table(title=f"vet {report.env_id} ({report.env_hash})")
    table.add_column("task", overflow="fold")
    table.add_column("verdict")
    table.add_column("failing checks", overflow="fold")
    table.add_column("exposed to", overflow="fold")
    table.add_column("warnings", overflow="fold")
    for t in report.tasks:
        by = {c.name: c.status for c in t.checks}
        table.add_row(
            t.task_id,
            f"[{_VERDICT_STYLE[t.verdict]}]{t.verdict}[/]",
            ", ".join(n for n in names if by.get(n) == "fail") or "-",
            ", ".join(exposed_to(t)) or "-",
            ", ".join(n for n in names if by.get(n) == "warn") or "-",
        )
    out().print(table)
    lines = [(t, reason) for t in report.tasks for reason in t.reasons[:1]]
    for t, reason in lines[:20]:
        out().print(f"  [{_VERDICT_STYLE[t.verdict]}]{t.task_id}[/]: {reason}")
    if len(lines) > 20:
        out().print(f"  ... and {len(lines) - 20} more tasks with findings (see vet.json)")
    print_baseline_passes(report)
    for c in report.env_checks:
        out().print(f"[{_STYLE[c.status]}]{c.status:>4}[/] {c.name}: {c.summary}")
    counts = ", ".join(f"{k} {v}" for k, v in report.verdict_counts.items() if v)
    out().print(
        f"quality score [bold]{report.quality_score:.1f}[/] ({counts}); "
        f"{report.episodes} episodes, {report.infra_errors} infra errors, {report.elapsed_s:.0f}s; "
        f"{out_dir / 'vet.json'}"
    )


BASELINE_LINES = 60
"""Tasks a baseline passes, listed one a line before the rest is left to ``vet.json``."""


def print_baseline_passes(report) -> None:  # type: ignore[no-untyped-def]
    """Every task a no-op, empty-answer or spam agent passes, with the reward components it
    satisfied there (the ``baseline_passes`` environment check's evidence)."""
    check = next((c for c in report.env_checks if c.name == "baseline_passes"), None)
    by_task = check.evidence.get("by_task", {}) if check is not None else {}
    if not by_task:
        return
    counts = ", ".join(f"{p} {n}" for p, n in check.evidence.get("counts", {}).items())
    out().print(
        f"[bold]tasks passed by an agent that does no work[/] ({counts}; reward >= 1; "
        "components satisfied):"
    )
    rows = list(by_task.items())
    for task_id, probes in rows[:BASELINE_LINES]:
        parts = [
            f"[yellow]{p}[/] {o['reward']:g} ({', '.join(o['satisfied']) or 'no component'})"
            for p, o in probes.items()
        ]
        out().print(f"  {task_id}: " + "; ".join(parts))
    if len(rows) > BASELINE_LINES:
        out().print(
            f"  ... and {len(rows) - BASELINE_LINES} more tasks (vet.json: baseline_passes)"
        )


def exposed_to(task) -> list[str]:  # type: ignore[no-untyped-def]
    """The probes that won on a task: a baseline that passes (no-op, empty answer, spam),
    hacks the verifier did not defend, leaks that copy."""
    names: list[str] = []
    for c in task.checks:
        if c.name in ("noop", "spam") and c.status == "fail":
            names += c.evidence.get("passed", [])
        elif c.name == "tamper":
            names += sorted(c.evidence.get("winning_probes", {}))
        elif c.name == "answer_leak":
            copies = c.evidence.get("copies", {})
            names += sorted(n for n, o in copies.items() if o.get("outcome") == "exposed")
    return names
