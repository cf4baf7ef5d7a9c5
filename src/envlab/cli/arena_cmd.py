"""``envlab arena``: vet several environments (named, or a catalogue's) and rank them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import typer

from envlab.cli import options as O
from envlab.cli.console import out, run_async
from envlab.cli.vet_cmds import _SANDBOX, _config, _vet_one


def arena_cmd(
    envs: Annotated[list[str] | None, typer.Argument(help="Environments to vet and rank.")] = None,
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            metavar="SOURCES",
            help="Vet every environment these sources find instead: envlab,rg,gym,ta,vf or "
            "all (docs/arena.md).",
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", help="Environments vetted at once (--catalog).")
    ] = 2,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted --catalog arena in --out.")
    ] = False,
    env_timeout: Annotated[
        float,
        typer.Option(
            "--env-timeout", help="Seconds one environment's vetting may take (--catalog)."
        ),
    ] = 300.0,
    costs: Annotated[
        Path | None,
        typer.Option(
            "--costs",
            metavar="FILE",
            help="An earlier arena.json whose measured times order the environments, longest "
            "first (--catalog; default: their load times).",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Trainability agent (none: skip; --catalog's default)."),
    ] = None,
    samples: Annotated[int, typer.Option("--samples", "-k")] = 4,
    oracle_runs: Annotated[int, typer.Option("--oracle-runs")] = 5,
    group_size: Annotated[int, typer.Option("--group-size")] = 8,
    concurrency: O.ConcurrencyOption = 2,
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    tasks: Annotated[int | None, typer.Option("--tasks", "-n")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Arena directory.")] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="HTML page (default OUT/arena.html).")
    ] = None,
    sandbox: Annotated[str | None, _SANDBOX] = None,
    as_json: O.JsonOption = False,
) -> None:
    """Vet several environments and rank them: environments, not models."""
    from envlab.cli.run_dirs import default_out_dir
    from envlab.core.errors import ConfigError
    from envlab.rollout.driver import backend_session
    from envlab.runs import safe_name
    from envlab.vet.arena import rank, write_html

    out_dir = out_dir or default_out_dir("arena")
    if catalog is not None:
        if envs:
            raise ConfigError("give environments or --catalog, not both")
        cfg = _config(samples, oracle_runs, group_size, concurrency, tasks or 8, backend, address)
        run = CatalogRun(agent or "none", cfg, jobs, resume, env_timeout, costs)
        _arena_catalog(catalog, run, out_dir, html, as_json)
        return
    if not envs:
        raise ConfigError("name the environments to rank, or give --catalog SOURCES")
    cfg = _config(samples, oracle_runs, group_size, concurrency, tasks, backend, address)
    reports = []
    with backend_session(backend, address, concurrency):  # Ray started once for every env
        for i, name in enumerate(envs):
            where = out_dir / f"{i:02d}-{safe_name(name, 60)}"
            vetting = _vet_one(name, {}, agent or "smollm2", where, cfg, sandbox, not as_json)
            reports.append(run_async(vetting))
    ranking = rank(reports)
    page = write_html(ranking, reports, html or out_dir / "arena.html")
    (out_dir / "arena.json").write_text(
        json.dumps([r.model_dump(mode="json") for r in ranking], indent=2)
    )
    if as_json:
        typer.echo(json.dumps([r.model_dump(mode="json") for r in ranking], indent=2))
        return
    _print_ranking(ranking)
    out().print(f"wrote {page}")


def _print_ranking(ranking: list[Any]) -> None:
    from rich.table import Table

    table = Table(title="arena: environments ranked")
    for col in (
        "rank",
        "environment",
        "score",
        "clean",
        "ok",
        "quarantine",
        "broken",
        "trivial",
        "dead",
        "tasks",
    ):
        table.add_column(col, justify="right" if col not in ("environment",) else "left")
    for r in ranking:
        c = r.verdict_counts
        table.add_row(
            str(r.rank),
            r.env_id,
            f"{r.quality_score:.1f}",
            "yes" if r.clean else "[red]no[/]",
            str(c["ok"]),
            str(c["quarantine"]),
            str(c["broken"]),
            str(c["trivial"]),
            str(c["dead"]),
            str(r.tasks),
        )
    out().print(table)


class CatalogRun(NamedTuple):
    """How ``arena --catalog`` vets each environment, and where: ``cfg.backend`` (``local``: a
    process here; ``ray``: a Ray task on some node of ``cfg.address``)."""

    agent: str
    cfg: Any
    jobs: int
    resume: bool
    env_timeout: float
    costs: Path | None = None
    """An earlier ``arena.json`` whose measured costs order the environments."""

    def vet_args(self) -> list[str]:
        """The vet process's own options: its episodes run where it runs (``--backend local``
        on a Ray node too)."""
        c = self.cfg
        return ["--agent", self.agent, "--samples", str(c.samples), "--oracle-runs",
                str(c.oracle_runs), "--group-size", str(c.group_size), "--concurrency",
                str(c.concurrency), "--tasks", str(c.tasks), "--backend", "local"]  # fmt: skip


def _arena_catalog(
    sources_text: str, run: CatalogRun, out_dir: Path, html: Path | None, as_json: bool
) -> None:
    """``arena --catalog``: find, vet what loaded (``jobs`` at a time, the costliest first,
    each in a process of its own, here or as a Ray task), rank, write the page."""
    from envlab.adapters.catalog import parse_sources
    from envlab.cli.arena_catalog import costs_of, reports_of, run_catalog, summary_lines
    from envlab.cli.progress import CatalogProgress
    from envlab.core.errors import ConfigError
    from envlab.rollout.driver import backend_session
    from envlab.vet.arena import rank, write_html

    if run.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {run.jobs}")
    if run.env_timeout <= 0:
        raise ConfigError(f"--env-timeout must be > 0 seconds, got {run.env_timeout:g}")
    sources = parse_sources(sources_text)
    settings = {"agent": run.agent, "tasks": run.cfg.tasks, "samples": run.cfg.samples,
                "env_timeout_s": run.env_timeout}  # fmt: skip
    costs = costs_of(run.costs) if run.costs is not None else {}
    cpus = run.jobs * run.cfg.concurrency  # a local Ray instance holds --jobs vettings at once
    with (
        backend_session(run.cfg.backend, run.cfg.address, cpus),
        CatalogProgress(enabled=not as_json) as bar,
    ):
        arena = run_async(
            run_catalog(sources, out_dir, _catalog_vet(run), settings=settings, jobs=run.jobs,
                        resume=run.resume, progress=bar, costs=costs)
        )  # fmt: skip
    reports = reports_of(arena)
    ranking = rank(reports)
    unvetted = [(e.name, e.status, e.reason) for e in arena.entries if e.status != "vetted"]
    page = write_html(ranking, reports, html or out_dir / "arena.html", unvetted)
    if as_json:
        typer.echo(arena.model_dump_json(indent=2))
        return
    _print_ranking(ranking)
    for line in summary_lines(arena):
        out().print(line)
    out().print(f"wrote {out_dir / 'arena.json'} and {page}")


def _catalog_vet(run: CatalogRun) -> Any:
    """How one environment is vetted: a process here, or a Ray task (connected already)."""
    from envlab.cli.arena_catalog import process_vet

    if run.cfg.backend == "ray":
        from envlab.cli.arena_ray import RayVet

        return RayVet(run.vet_args(), run.env_timeout, cpus=run.cfg.concurrency)
    return process_vet(run.vet_args(), run.env_timeout)
