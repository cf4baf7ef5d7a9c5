"""The options commands share, declared once, and what turns them into objects.

Each ``...Option`` is an ``Annotated`` type a command's parameter takes (its default stays in
the command: ``concurrency: ConcurrencyOption = 8``); ``open_env``, ``open_agent``,
``parse_kv`` and the checks read the values the same way for every command. Nothing here imports
more than typer until a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from envlab.core import AgentFactory, EnvSpec, Limits

SANDBOXES = ("bwrap", "local")
PERTURB_HELP = (
    "Seeded faults on the tool calls, comma-separated NAME=VALUE: timeout=P[:WAIT_S], "
    "transient=P[:FAILS], latency=MEAN_S|LOW_S:HIGH_S, rate_limit=N[/WINDOW_STEPS], "
    "stale=P[:K_WRITES], truncate=P[:FRACTION], malformed=P, inject=P (docs/robustness.md)."
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", metavar="DIR", help="Run directory.")
]
ResumeOption = Annotated[bool, typer.Option("--resume", help="Finish an interrupted run in --out.")]
AgentOption = Annotated[
    str, typer.Option("--agent", "-a", metavar="AGENT", help="Agent name (see `envlab agents`).")
]
EnvArgOption = Annotated[
    list[str] | None,
    typer.Option("--env-arg", "-e", metavar="KEY=VALUE", help="Environment config (repeat)."),
]
AgentArgOption = Annotated[
    list[str] | None,
    typer.Option("--agent-arg", metavar="KEY=VALUE", help="Agent argument (repeat)."),
]
TasksOption = Annotated[
    int | None, typer.Option("--tasks", "-n", help="Number of tasks (default all).")
]
SamplesOption = Annotated[int, typer.Option("--samples", "-k", help="Samples per task (a group).")]
ConcurrencyOption = Annotated[int, typer.Option("--concurrency", "-c", help="Episodes in flight.")]
BackendOption = Annotated[
    str,
    typer.Option(
        "--backend",
        metavar="local|ray",
        help="Where episodes run: this process, or Ray actors (docs/ray.md).",
    ),
]
AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        metavar="ADDR",
        help="Ray cluster of --backend ray: auto, ray://HOST:10001 (default: a local one).",
    ),
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the task set and episodes.")]
SplitOption = Annotated[str, typer.Option("--split", help="Task split.")]
SandboxOption = Annotated[
    str | None, typer.Option("--sandbox", metavar="bwrap|local", help="Sandbox of task folders.")
]
MaxRetriesOption = Annotated[
    int, typer.Option("--max-retries", help="Retries of an episode after infra_error.")
]
ConfidenceOption = Annotated[
    float, typer.Option("--confidence", help="Confidence level of the intervals.")
]
NoProgressOption = Annotated[bool, typer.Option("--no-progress", help="Hide progress.")]
MaxStepsOption = Annotated[
    int | None, typer.Option("--max-steps", help="Steps per episode (default: the task's).")
]
StepTimeoutOption = Annotated[
    float | None, typer.Option("--step-timeout", help="Seconds per step (default: the task's).")
]
EpisodeTimeoutOption = Annotated[
    float | None,
    typer.Option("--episode-timeout", help="Seconds per episode (default: the task's)."),
]
GradeTimeoutOption = Annotated[
    float | None, typer.Option("--grade-timeout", help="Seconds to grade (default: the task's).")
]
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


def parse_kv(pairs: list[str] | None, option: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is that value, else the string."""
    from envlab.core.errors import ConfigError

    kv: dict[str, Any] = {}
    for pair in pairs or []:
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
