"""``envlab task run|check``: run an agent on task folders, or self-check them.

``check`` is the contract of a task folder: the oracle (``solution/solve.sh``) scores 1 on every
run and the no-op agent scores 0, with no infrastructure error. Anything else is a broken task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table

from envlab.core import Agent, EnvlabError, Task
from envlab.envs.taskfolder import TerminalEnv, find_task_folders
from envlab.rollout import EpisodeConfig, run_episode

task_app = typer.Typer(
    help="Task folders (Harbor format): run an agent on them, or check them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


class EpisodeRow(BaseModel):
    task_id: str
    sample: int
    status: str
    reward: float | None
    components: dict[str, float] = Field(default_factory=dict)
    duration_s: float
    attempts: int
    error: str | None = None
    grader_failed: str | None = None
    """Why the grade was invalid twice (the episode then scores 0)."""
    verifier_exit_code: int | None = None
    verifier_output_tail: str = ""

    def why(self) -> str:
        """One line on why this sample scored what it did."""
        if self.grader_failed:
            return "grader failed: " + self.grader_failed.splitlines()[0]
        if self.error:
            return self.error.strip().splitlines()[0]
        tail = self.verifier_output_tail.strip().splitlines()
        code = self.verifier_exit_code
        return f"test.sh exit {code}" + (f": {tail[-1][:160]}" if tail else "")


class CheckRow(BaseModel):
    task_id: str
    ok: bool
    oracle: list[EpisodeRow]
    noop: list[EpisodeRow]
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def make_agent(name: str) -> Agent:
    """An agent by name; ``shell:FILE`` runs FILE in the workspace."""
    from envlab.agents import load_agent

    return load_agent(name)


def episode_config(task: Task, max_retries: int) -> EpisodeConfig:
    """Limits from ``task.toml``: the agent's timeout bounds the episode, the verifier's the
    grade (plus a margin for building the verifier sandbox)."""
    return EpisodeConfig(
        step_timeout=None,
        episode_timeout=float(task.metadata["agent_timeout_sec"]),
        grade_timeout=float(task.metadata["verifier_timeout_sec"]) + 60.0,
        max_retries=max_retries,
    )


async def run_samples(
    env: TerminalEnv,
    agent: Agent,
    tasks: list[Task],
    samples: int,
    *,
    concurrency: int = 4,
    max_retries: int = 1,
) -> list[EpisodeRow]:
    env_hash = env.content_hash()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, sample: int) -> EpisodeRow:
        async with gate:
            traj = await run_episode(
                env,
                agent,
                task,
                sample,
                env_id=f"taskfolder:{env.path.name}",
                env_hash=env_hash,
                agent_spec=agent.spec,
                config=episode_config(task, max_retries),
            )
        grade = traj.info.get("grade") or {}
        return EpisodeRow(
            task_id=task.id,
            sample=sample,
            status=str(traj.status),
            reward=traj.reward,
            components=traj.components,
            duration_s=round(traj.timings.duration_s, 3),
            attempts=traj.attempts,
            error=traj.error,
            grader_failed=traj.grader_failed,
            verifier_exit_code=grade.get("verifier_exit_code"),
            verifier_output_tail=str(grade.get("verifier_output_tail", "")),
        )

    return list(await asyncio.gather(*(one(t, s) for t in tasks for s in range(samples))))


async def check(
    path: Path, runs: int, noop_runs: int, concurrency: int, max_retries: int = 0
) -> list[CheckRow]:
    from envlab.agents.scripted import NoopAgent, OracleAgent
    from envlab.envs.taskfolder import prepare_workspace

    env = TerminalEnv(path)
    tasks = list(env.tasks())
    rows: list[CheckRow] = []
    oracle = await run_samples(
        env, OracleAgent(), tasks, runs, concurrency=concurrency, max_retries=max_retries
    )
    noop = await run_samples(
        env, NoopAgent(), tasks, noop_runs, concurrency=concurrency, max_retries=max_retries
    )
    for folder in find_task_folders(path):
        o = [r for r in oracle if r.task_id == folder.name]
        n = [r for r in noop if r.task_id == folder.name]
        problems = []
        if folder.solution is None:
            problems.append("no solution/solve.sh")
        for r in o:
            if r.status != "ok" or r.reward != 1.0:
                problems.append(
                    f"oracle sample {r.sample}: {r.status}, reward {r.reward} ({r.why()})"
                )
        for r in n:
            if r.status != "ok" or r.reward != 0.0:
                problems.append(
                    f"noop sample {r.sample}: {r.status}, reward {r.reward} ({r.why()})"
                )
        notes = [f"task.toml: unknown key {k}" for k in folder.config.unknown_keys()]
        try:
            notes += (await prepare_workspace(folder)).notes
        except EnvlabError as e:
            notes.append(f"build: {e}")
        rows.append(
            CheckRow(
                task_id=folder.name,
                ok=not problems,
                oracle=o,
                noop=n,
                problems=problems,
                notes=notes,
            )
        )
    return rows


def _reward(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


@task_app.command("run")
def run_cmd(
    path: Annotated[Path, typer.Argument(help="A task folder or a directory of them.")],
    agent: Annotated[
        str, typer.Option("--agent", "-a", help="Agent name, or shell:FILE to run a script.")
    ],
    samples: Annotated[int, typer.Option("--samples", "-k", help="Samples per task.")] = 1,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c")] = 4,
    max_retries: Annotated[int, typer.Option(help="Retries after an infra_error.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Run AGENT on the task folder(s) at PATH; print reward and status per sample."""
    if samples < 1 or concurrency < 1:
        raise EnvlabError("--samples and --concurrency must be >= 1")
    env = TerminalEnv(path)
    the_agent = make_agent(agent)
    rows = asyncio.run(
        run_samples(
            env,
            the_agent,
            list(env.tasks()),
            samples,
            concurrency=concurrency,
            max_retries=max_retries,
        )
    )
    if as_json:
        out.print_json(json.dumps([r.model_dump(mode="json") for r in rows]))
    else:
        table = Table(title=f"{path} / {the_agent.spec.name}")
        for col in ("task", "sample", "status", "reward", "components", "seconds", "why"):
            table.add_column(col, overflow="fold")
        for r in rows:
            comps = ", ".join(f"{k}={v:g}" for k, v in r.components.items())
            table.add_row(
                r.task_id, str(r.sample), r.status, _reward(r.reward), comps,
                f"{r.duration_s:.2f}", r.why()[:200],
            )  # fmt: skip
        out.print(table)
    if any(r.status in ("infra_error", "env_error") for r in rows):
        raise typer.Exit(1)


@task_app.command("check")
def check_cmd(
    path: Annotated[Path, typer.Argument(help="A task folder or a directory of them.")],
    runs: Annotated[int, typer.Option("--runs", "-n", help="Oracle runs per task.")] = 5,
    noop_runs: Annotated[int, typer.Option("--noop-runs", help="No-op runs per task.")] = 1,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check task folders: the oracle must score 1 on every run, the no-op agent 0."""
    if runs < 1 or noop_runs < 1 or concurrency < 1:
        raise EnvlabError("--runs, --noop-runs and --concurrency must be >= 1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # FROM notes are shown per task
        rows = asyncio.run(check(path, runs, noop_runs, concurrency))
    if as_json:
        out.print_json(json.dumps([r.model_dump(mode="json") for r in rows]))
    else:
        table = Table(title=f"envlab task check {path}")
        for col in ("task", "result", "oracle", "noop", "problems / notes"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(
                r.task_id,
                "[green]ok[/]" if r.ok else "[red]FAIL[/]",
                " ".join(_reward(e.reward) for e in r.oracle),
                " ".join(_reward(e.reward) for e in r.noop),
                "\n".join([*r.problems, *r.notes]),
            )
        out.print(table)
    if not all(r.ok for r in rows):
        raise typer.Exit(1)


def main() -> None:
    """Run ``task_app`` on its own (``python -m envlab.cli.task``)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        task_app()
    except EnvlabError as e:
        err.print(f"[bold red]error:[/] {e}")
        sys.exit(2)


if __name__ == "__main__":
    main()
