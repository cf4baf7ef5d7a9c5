"""``envlab eval``: run an agent in an environment, print the scores table (or JSON).

Exits 0 when episodes were scored; 1 when none was (every episode ``infra_error`` or
``env_error``: the numbers would measure nothing) or when the agent's model endpoint failed in
every episode (scored 0, but a set-up to fix), with the first error of each failure status on
screen either way.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli import options as O
from envlab.cli.console import run_async

if TYPE_CHECKING:
    from envlab.cli.evaluate import Evaluation


def eval_cmd(
    env: Annotated[
        str,
        typer.Argument(
            metavar="ENV",
            help="Environment: a name (see `envlab envs`), module:Class, file.py:Class, "
            "or a task folder path.",
        ),
    ],
    agent: O.AgentOption,
    tasks: O.TasksOption = None,
    samples: O.SamplesOption = 1,
    concurrency: O.ConcurrencyOption = 8,
    out_dir: O.OutOption = None,
    resume: O.ResumeOption = False,
    seed: O.SeedOption = 0,
    split: O.SplitOption = "test",
    env_arg: O.EnvArgOption = None,
    agent_arg: O.AgentArgOption = None,
    max_steps: O.MaxStepsOption = None,
    step_timeout: O.StepTimeoutOption = None,
    episode_timeout: O.EpisodeTimeoutOption = None,
    grade_timeout: O.GradeTimeoutOption = None,
    max_retries: O.MaxRetriesOption = 2,
    pass_threshold: Annotated[
        float, typer.Option("--pass-threshold", help="Reward counted as a pass.")
    ] = 1.0,
    sandbox: O.SandboxOption = None,
    perturb: Annotated[
        str | None, typer.Option("--perturb", metavar="NAME=VALUE,...", help=O.PERTURB_HELP)
    ] = None,
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    model_failures: O.ModelFailuresOption = "agent",
    fail_under: Annotated[
        float | None,
        typer.Option(
            "--fail-under",
            metavar="REWARD",
            help="Exit 1 when the mean reward is below REWARD (for CI: an oracle that must pass).",
        ),
    ] = None,
    as_json: O.JsonOption = False,
    no_progress: O.NoProgressOption = False,
) -> None:
    """Run AGENT on ENV: tasks x samples episodes into a run directory, then summarize."""
    from envlab.cli.eval_table import print_evaluation, print_failures, print_notes
    from envlab.cli.evaluate import evaluate
    from envlab.cli.progress import RunProgress
    from envlab.cli.run_dirs import default_out_dir
    from envlab.core.errors import ConfigError
    from envlab.rollout import EpisodeConfig
    from envlab.rollout.driver import check_backend

    if tasks is not None and tasks < 1:
        raise ConfigError(f"--tasks must be >= 1, got {tasks}")
    check_backend(backend, address)
    overrides = O.limit_overrides(max_steps, step_timeout, episode_timeout, grade_timeout)
    spec = O.open_env(env, O.parse_kv(env_arg or [], "--env-arg"), sandbox)
    spec = O.with_perturbations(spec, perturb)
    task_set = spec.tasks(seed=seed, n=tasks, split=split)
    out_dir = out_dir or default_out_dir("", env, agent)
    config = EpisodeConfig(
        overrides=overrides,
        max_retries=max_retries,
        model_failures=O.check_model_failures(model_failures),  # type: ignore[arg-type]
    )
    progress = RunProgress(pass_threshold=pass_threshold, enabled=not no_progress and not as_json)

    async def run() -> Evaluation:
        factory = O.open_agent(agent, O.parse_kv(agent_arg or [], "--agent-arg"))
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
