"""``envlab eval``: run an agent in an environment, print the scores table (or JSON).

Exits 0 when episodes were scored; 1 when none was (every episode ``infra_error`` or
``env_error``: the numbers would measure nothing) or when the agent's model endpoint failed in
every episode (scored 0, but a set-up to fix), with the first error of each failure status on
screen either way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envlab.cli.console import run_async

if TYPE_CHECKING:
    from envlab.cli.evaluate import Evaluation
    from envlab.core import AgentFactory, EnvSpec, Limits

SANDBOXES = ("bwrap", "local")

ModelFailuresOption = Annotated[
    str,
    typer.Option(
        "--model-failures",
        metavar="agent|exclude",
        help="Whose failure the agent's model endpoint failing past its retries is: the "
        "agent's (scored 0, the default) or, for a trusted endpoint of your own (a trainer's "
        "generation server), exclude (infra_error: retried, not scored; every report says so).",
    ),
]


def check_model_failures(value: str) -> str:
    from envlab.core.errors import ConfigError

    if value not in ("agent", "exclude"):
        raise ConfigError(f"--model-failures must be agent or exclude, got {value!r}")
    return value


def parse_kv(pairs: list[str], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is that value, else the string."""
    from envlab.core.errors import ConfigError

    kv: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{option} expects KEY=VALUE, got {pair!r}")
        try:
            kv[key] = json.loads(raw)
        except json.JSONDecodeError:
            kv[key] = raw
    return kv


def check_sandbox(sandbox: str | None) -> None:
    from envlab.core.errors import ConfigError

    if sandbox is not None and sandbox not in SANDBOXES:
        raise ConfigError(f"--sandbox must be one of {', '.join(SANDBOXES)}, got {sandbox!r}")


def check_backend(backend: str, address: str | None) -> None:
    """``--backend``/``--address`` checked before anything runs (Ray is not imported here)."""
    from envlab.core.errors import ConfigError
    from envlab.rollout.runner import BACKENDS

    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if address is not None and backend != "ray":
        raise ConfigError("--address names a Ray cluster; it needs --backend ray")


def open_env(name: str, config: dict[str, Any], sandbox: str | None = None) -> EnvSpec:
    """The spec called ``name`` (a registered name, ``module:attr``, ``file.py:attr`` or a task
    folder path), with ``config``; ``sandbox`` goes into the config of specs that take one."""
    from envlab.core.errors import ConfigError
    from envlab.envs import load_env

    check_sandbox(sandbox)
    if sandbox is not None:
        config = {**config, "sandbox": sandbox}
    spec = load_env(name, **config)
    if sandbox is not None and "sandbox" not in type(spec).Config.model_fields:
        raise ConfigError(
            f"--sandbox applies to environments that run commands in a sandbox (task folders); "
            f"{spec.name!r} takes no sandbox"
        )
    return spec


PERTURB_HELP = (
    "Seeded faults on the tool calls, comma-separated NAME=VALUE: timeout=P[:WAIT_S], "
    "transient=P[:FAILS], latency=MEAN_S|LOW_S:HIGH_S, rate_limit=N[/WINDOW_STEPS], "
    "stale=P[:K_WRITES], truncate=P[:FRACTION], malformed=P, inject=P (docs/robustness.md)."
)


def with_perturbations(spec: EnvSpec, text: str | None) -> EnvSpec:
    """``spec`` with the perturbations of ``--perturb`` (none: ``spec`` itself)."""
    if text is None:
        return spec
    from envlab.envs.perturb import parse_perturbations, perturb

    return perturb(spec, parse_perturbations(text))


def open_agent(name: str, config: dict[str, Any]) -> AgentFactory:
    """The ``AgentFactory`` called ``name`` (see ``envlab agents``), or at ``module:attr``."""
    from envlab.agents import load_agent

    return load_agent(name, **config)


def limit_overrides(
    max_steps: int | None,
    step_timeout: float | None,
    episode_timeout: float | None,
    grade_timeout: float | None,
) -> Limits:
    """The user's limits, set over each task's own (``spec.limits(task)``)."""
    from envlab.core import ConfigError, Limits

    for flag, value in (("--max-steps", max_steps), ("--step-timeout", step_timeout),
                        ("--episode-timeout", episode_timeout),
                        ("--grade-timeout", grade_timeout)):  # fmt: skip
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be > 0, got {value}")
    return Limits.overrides(
        max_steps=max_steps,
        step_timeout_s=step_timeout,
        episode_timeout_s=episode_timeout,
        grade_timeout_s=grade_timeout,
    )


def eval_cmd(
    env: Annotated[
        str,
        typer.Argument(
            metavar="ENV",
            help="Environment: a name (see `envlab envs`), module:Class, file.py:Class, "
            "or a task folder path.",
        ),
    ],
    agent: Annotated[
        str,
        typer.Option("--agent", "-a", metavar="AGENT", help="Agent name (see `envlab agents`)."),
    ],
    tasks: Annotated[
        int | None, typer.Option("--tasks", "-n", help="Number of tasks (default all).")
    ] = None,
    samples: Annotated[
        int, typer.Option("--samples", "-k", help="Samples per task (a group).")
    ] = 1,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", help="Episodes in flight.")
    ] = 8,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="DIR", help="Run directory.")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted run in --out.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the task set and episodes.")] = 0,
    split: Annotated[str, typer.Option("--split", help="Task split.")] = "test",
    env_arg: Annotated[
        list[str] | None,
        typer.Option("--env-arg", "-e", metavar="KEY=VALUE", help="Environment config (repeat)."),
    ] = None,
    agent_arg: Annotated[
        list[str] | None,
        typer.Option("--agent-arg", metavar="KEY=VALUE", help="Agent argument (repeat)."),
    ] = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Steps per episode (default: the task's).")
    ] = None,
    step_timeout: Annotated[
        float | None,
        typer.Option("--step-timeout", help="Seconds per step (default: the task's)."),
    ] = None,
    episode_timeout: Annotated[
        float | None,
        typer.Option("--episode-timeout", help="Seconds per episode (default: the task's)."),
    ] = None,
    grade_timeout: Annotated[
        float | None,
        typer.Option("--grade-timeout", help="Seconds to grade (default: the task's)."),
    ] = None,
    max_retries: Annotated[
        int, typer.Option("--max-retries", help="Retries of an episode after infra_error.")
    ] = 2,
    pass_threshold: Annotated[
        float, typer.Option("--pass-threshold", help="Reward counted as a pass.")
    ] = 1.0,
    sandbox: Annotated[
        str | None,
        typer.Option("--sandbox", metavar="bwrap|local", help="Sandbox of task folders."),
    ] = None,
    perturb: Annotated[
        str | None, typer.Option("--perturb", metavar="NAME=VALUE,...", help=PERTURB_HELP)
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            metavar="local|ray",
            help="Where episodes run: this process, or Ray actors (docs/ray.md).",
        ),
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            metavar="ADDR",
            help="Ray cluster of --backend ray: auto, ray://HOST:10001 (default: a local one).",
        ),
    ] = None,
    model_failures: ModelFailuresOption = "agent",
    fail_under: Annotated[
        float | None,
        typer.Option(
            "--fail-under",
            metavar="REWARD",
            help="Exit 1 when the mean reward is below REWARD (for CI: an oracle that must pass).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
) -> None:
    """Run AGENT on ENV: tasks x samples episodes into a run directory, then summarize."""
    from envlab.cli.eval_table import print_evaluation, print_failures, print_notes
    from envlab.cli.evaluate import evaluate
    from envlab.cli.progress import RunProgress
    from envlab.cli.run_dirs import default_out_dir
    from envlab.core.errors import ConfigError
    from envlab.rollout import EpisodeConfig

    if tasks is not None and tasks < 1:
        raise ConfigError(f"--tasks must be >= 1, got {tasks}")
    check_backend(backend, address)
    overrides = limit_overrides(max_steps, step_timeout, episode_timeout, grade_timeout)
    spec = open_env(env, parse_kv(env_arg or [], "--env-arg"), sandbox)
    spec = with_perturbations(spec, perturb)
    task_set = spec.tasks(seed=seed, n=tasks, split=split)
    out_dir = out_dir or default_out_dir("", env, agent)
    config = EpisodeConfig(
        overrides=overrides,
        max_retries=max_retries,
        model_failures=check_model_failures(model_failures),  # type: ignore[arg-type]
    )
    progress = RunProgress(pass_threshold=pass_threshold, enabled=not no_progress and not as_json)

    async def run() -> Evaluation:
        factory = open_agent(agent, parse_kv(agent_arg or [], "--agent-arg"))
        try:
            with progress:
                return await evaluate(
                    spec, factory, task_set, out_dir=out_dir, samples=samples,
                    concurrency=concurrency, seed=seed, resume=resume, config=config,
                    observer=progress, pass_threshold=pass_threshold,
                    command=["envlab", *sys.argv[1:]], backend=backend, ray_address=address,
                )  # fmt: skip
        finally:
            await factory.aclose()

    ev = run_async(run())
    if as_json:
        payload = ev.summary.model_dump(mode="json", exclude={"tasks"})
        payload["run_dir"] = str(ev.result.run_dir)
        payload["components"] = ev.details.components
        payload["first_errors"] = ev.details.first_errors
        typer.echo(json.dumps(payload, indent=2))
        print_failures(ev, to_stderr=True)
        print_notes(ev)
    else:
        print_evaluation(ev, env)
    if ev.nothing_scored or ev.every_model_failed:
        raise typer.Exit(1)
    mean = ev.summary.mean_reward
    if fail_under is not None and (mean is None or mean < fail_under):
        shown = "none" if mean is None else f"{mean:.3f}"
        typer.echo(f"mean reward {shown} is below --fail-under {fail_under:g}", err=True)
        raise typer.Exit(1)
