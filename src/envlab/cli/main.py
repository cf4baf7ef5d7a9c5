"""``envlab``: eval, envs, agents. Every command prints a table, or JSON with ``--json``."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from envlab.cli.gc import gc_cmd
from envlab.cli.measure_cmds import compare_cmd, report_cmd, summary_rows
from envlab.cli.serve_model import serve_model_cmd
from envlab.cli.task import task_app
from envlab.cli.vet_cmds import arena_cmd, vet_cmd
from envlab.core import EnvlabError
from envlab.core.registry import Registry

app = typer.Typer(
    help="envlab: build, vet, measure and train on environments for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _parse_kv(pairs: list[str], option: str) -> dict[str, Any]:
    kv: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise EnvlabError(f"{option} expects KEY=VALUE, got {pair!r}")
        try:
            kv[key] = json.loads(raw)
        except json.JSONDecodeError:
            kv[key] = raw
    return kv


@app.command("eval")
def eval_cmd(
    env: Annotated[
        str, typer.Argument(help="Environment name (see `envlab envs`) or module:factory.")
    ],
    agent: Annotated[str, typer.Option("--agent", "-a", help="Agent name (see `envlab agents`).")],
    tasks: Annotated[
        int | None, typer.Option("--tasks", "-n", help="Number of tasks (default all).")
    ] = None,
    samples: Annotated[
        int, typer.Option("--samples", "-k", help="Samples per task (a group).")
    ] = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Episodes in flight.")
    ] = 8,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory.")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted run in --out.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the task set and episodes.")] = 0,
    split: Annotated[str, typer.Option("--split", help="Task split.")] = "test",
    env_arg: Annotated[
        list[str] | None, typer.Option("--env-arg", "-e", help="KEY=VALUE for the environment.")
    ] = None,
    agent_arg: Annotated[
        list[str] | None, typer.Option("--agent-arg", help="KEY=VALUE for the agent.")
    ] = None,
    step_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds per step (agent + env); default 60, none for task folders."),
    ] = None,
    episode_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds per episode; default 600, or the tasks' own agent timeout."),
    ] = None,
    max_retries: Annotated[int, typer.Option(help="Retries of an episode after infra_error.")] = 2,
    pass_threshold: Annotated[float, typer.Option(help="Reward counted as a pass.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
) -> None:
    """Run AGENT on ENV: tasks x samples episodes into a run directory, then summarize."""
    from envlab.agents import load_agent
    from envlab.envs import load_env
    from envlab.measure.evaluate import evaluate
    from envlab.rollout import EpisodeConfig

    environment = load_env(env, **_parse_kv(env_arg or [], "--env-arg"))
    the_agent = load_agent(agent, **_parse_kv(agent_arg or [], "--agent-arg"))
    if tasks is not None and tasks < 1:
        raise EnvlabError(f"--tasks must be >= 1, got {tasks}")
    task_set = environment.tasks(seed=seed, n=tasks, split=split)
    declared = [t.metadata.get("agent_timeout_sec") for t in task_set]
    if declared and all(isinstance(x, int | float) for x in declared):
        # task folders bound each command themselves (no step limit unless asked for) and
        # declare the agent's time budget
        episode_timeout = episode_timeout or max(declared) + 60.0  # type: ignore[type-var]
        verifier = [t.metadata.get("verifier_timeout_sec") or 0.0 for t in task_set]
        grade_timeout = max(600.0, max(verifier) + 60.0)
    else:
        step_timeout = 60.0 if step_timeout is None else step_timeout
        episode_timeout = 600.0 if episode_timeout is None else episode_timeout
        grade_timeout = 600.0
    if out_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        safe_env = env.replace("/", "_").replace(":", "_")
        out_dir = Path("runs") / f"{safe_env}-{agent.replace(':', '_').replace('/', '_')}-{stamp}"
    result, summary = asyncio.run(
        evaluate(
            environment,
            the_agent,
            task_set,
            out_dir=out_dir,
            samples=samples,
            concurrency=concurrency,
            seed=seed,
            resume=resume,
            env_id=env,
            episode_config=EpisodeConfig(
                step_timeout=step_timeout,
                episode_timeout=episode_timeout,
                grade_timeout=grade_timeout,
                max_retries=max_retries,
            ),
            progress=not no_progress and not as_json,
            pass_threshold=pass_threshold,
            command=["envlab", *sys.argv[1:]],
        )
    )
    for note in result.notes:
        err.print(f"[yellow]note:[/] {note}")
    if as_json:
        payload = summary.model_dump(mode="json", exclude={"tasks"})
        payload["run_dir"] = str(result.run_dir)
        out.print_json(json.dumps(payload))
        return
    table = Table(title=f"{env} / {the_agent.spec.name}  ({result.run_dir})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("tasks", str(summary.n_tasks))
    table.add_row("episodes (scored)", f"{summary.n_episodes} ({summary.n_scored})")
    table.add_row("mean reward", _fmt(summary.mean_reward))
    for name, value in summary_rows(summary):
        table.add_row(name, value)
    for k, v in summary.pass_at_k.items():
        table.add_row(f"pass@{k}", _fmt(v))
    for k, v in summary.pass_hat_k.items():
        if k > 1:
            table.add_row(f"pass^{k}", _fmt(v))
    for status, n in summary.status_counts.items():
        if status != "ok":
            table.add_row(f"status {status}", str(n))
    table.add_row("grader failed (scored 0)", str(summary.n_grader_failed))
    table.add_row("tool-call errors", str(summary.tool_errors))
    table.add_row("new / resumed episodes", f"{result.new_episodes} / {result.skipped_episodes}")
    table.add_row("wall time", f"{result.elapsed_s:.1f}s")
    out.print(table)
    if the_agent.spec.privileged:
        err.print(
            "[yellow]note:[/] a privileged agent read hidden answers: this checks the environment."
        )


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


@app.command("envs")
def envs_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the environments found through the envlab.envs entry points."""
    from envlab.envs import ENVS

    _print_rows(_registry_rows(ENVS), as_json, "environments")


@app.command("agents")
def agents_cmd(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the agents found through the envlab.agents entry points."""
    from envlab.agents import AGENTS

    _print_rows(_registry_rows(AGENTS), as_json, "agents")


def _registry_rows(registry: Registry) -> list[dict[str, str]]:
    """One row per plug-in: its ``description``, else the first line of its docstring."""
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
        out.print_json(json.dumps(rows))
        return
    table = Table(title=title)
    for col in ("name", "description", "target"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["description"], r["target"])
    out.print(table)


app.command("compare")(compare_cmd)
app.command("report")(report_cmd)
app.command("vet")(vet_cmd)
app.add_typer(task_app, name="task")
app.command("serve-model")(serve_model_cmd)
app.command("arena")(arena_cmd)
app.command("gc")(gc_cmd)


def main() -> None:
    logging.basicConfig(
        level=logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=err, show_time=False, show_path=False)],
    )
    try:
        app()
    except EnvlabError as e:
        err.print(f"[bold red]error:[/] {e}")
        sys.exit(2)
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted:[/] recorded episodes are kept; rerun with --resume to finish."
        )
        sys.exit(130)


if __name__ == "__main__":
    main()
