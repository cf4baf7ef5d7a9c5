"""``envlab train ENV``: train a learner on ENV's train split through the async loop
(``envlab.train.loop``), then measure the trained policy against baselines on held-out tasks.

``--learner decision`` (the default) is the small decision model of ``envlab.train.decision``;
``--learner module:factory`` names any callable ``factory(spec=..., tasks=..., **learner_args)``
returning an ``envlab.train.learner.Learner``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envlab.cli import options as O
from envlab.cli.console import err, out, run_async
from envlab.cli.options import (
    ModelFailuresOption,
    check_model_failures,
    open_agent,
    open_env,
    parse_kv,
)

if TYPE_CHECKING:
    from envlab.core import EnvSpec, TaskSet
    from envlab.train.config import TrainResult
    from envlab.train.heldout import Contender, Heldout
    from envlab.train.learner import Learner


def open_learner(name: str, spec: EnvSpec, tasks: TaskSet, args: dict[str, Any]) -> Learner:
    """``decision``, or the learner a ``module:factory`` path makes."""
    from envlab.core.errors import ConfigError
    from envlab.core.registry import import_path

    if name == "decision":
        from envlab.train.decision_learner import DecisionConfig, DecisionLearner

        try:
            config = DecisionConfig(**{"seed": tasks.seed, **args})
        except TypeError as e:
            raise ConfigError(f"--learner-arg: {e}") from None
        return DecisionLearner.for_tasks(list(tasks), config)
    if ":" not in name:
        raise ConfigError(
            f"unknown learner {name!r}: use 'decision' or an import path 'module:factory'"
        )
    factory = import_path(name, "learner")
    return factory(spec=spec, tasks=tasks, **args)  # type: ignore[no-any-return]


def _contenders(learner_name: str, result: TrainResult, learner: Learner) -> list[Contender]:
    """The trained policy first, then the baselines of its kind."""
    from envlab.train.checkpoint import latest_checkpoint
    from envlab.train.heldout import Contender

    if learner_name != "decision":
        trained = [Contender("trained", learner.policy())]
        baseline = getattr(learner, "baseline_policy", None)  # the untrained snapshot, paired
        return trained if baseline is None else [*trained, Contender("untrained", baseline())]
    from envlab.train.decision import decision

    ckpt = latest_checkpoint(result.run_dir)
    return [
        Contender("trained", decision(checkpoint=str(ckpt), greedy=True)),
        Contender("random", decision(), floor=True),
        Contender("optimum", open_agent("oracle", {}), best=True),
    ]


def train_cmd(
    env: Annotated[str, typer.Argument(metavar="ENV", help="Environment (see `envlab envs`).")],
    learner_name: Annotated[
        str, typer.Option("--learner", help="'decision' or module:factory.")
    ] = "decision",
    learner_arg: Annotated[
        list[str] | None,
        typer.Option("--learner-arg", metavar="KEY=VALUE", help="Learner setting (repeat)."),
    ] = None,
    env_arg: O.EnvArgOption = None,
    steps: Annotated[int, typer.Option("--steps", help="Learner steps.")] = 150,
    groups_per_step: Annotated[
        int, typer.Option("--groups-per-step", help="Groups (tasks) per learner step.")
    ] = 16,
    group_size: Annotated[
        int, typer.Option("--group-size", help="Samples per group (GRPO's generations).")
    ] = 8,
    max_staleness: Annotated[
        int, typer.Option("--max-staleness", help="Oldest policy learned from, in versions.")
    ] = 1,
    sync: Annotated[
        bool, typer.Option("--sync", help="No overlap: generate, then learn (staleness 0).")
    ] = False,
    concurrency: O.ConcurrencyOption = 64,
    checkpoint_every: Annotated[
        int, typer.Option("--checkpoint-every", help="Learner steps between checkpoints.")
    ] = 10,
    seed: O.SeedOption = 0,
    train_tasks: Annotated[
        int | None, typer.Option("--train-tasks", help="Training tasks (default all).")
    ] = None,
    split: Annotated[str, typer.Option("--split", help="Training split.")] = "train",
    eval_tasks: Annotated[
        int, typer.Option("--eval-tasks", help="Held-out tasks measured after training (0: none).")
    ] = 1000,
    eval_split: Annotated[str, typer.Option("--eval-split", help="Held-out split.")] = "test",
    max_retries: O.MaxRetriesOption = 2,
    max_steps: O.MaxStepsOption = None,
    step_timeout: O.StepTimeoutOption = None,
    episode_timeout: O.EpisodeTimeoutOption = None,
    grade_timeout: O.GradeTimeoutOption = None,
    checkpoint_every_s: Annotated[
        float | None,
        typer.Option(
            "--checkpoint-every-s", help="Also checkpoint after a step this long after the last."
        ),
    ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory.")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue a killed run from its last checkpoint.")
    ] = False,
    model_failures: ModelFailuresOption = "agent",
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    as_json: O.JsonOption = False,
    no_progress: O.NoProgressOption = False,
) -> None:
    """Train a policy on ENV with rollouts and learning overlapped, then compare it on held-out
    tasks with a random policy and the best achievable."""
    from envlab.cli.run_dirs import default_out_dir
    from envlab.cli.train_progress import TrainProgress
    from envlab.core.errors import ConfigError
    from envlab.rollout import EpisodeConfig
    from envlab.rollout.driver import backend_session
    from envlab.runs.metrics import HELDOUT_FILE, totals
    from envlab.train.loop import TrainConfig, train

    if eval_tasks < 0:
        raise ConfigError(f"--eval-tasks must be >= 0, got {eval_tasks}")
    if resume and out_dir is None:
        raise ConfigError("--resume continues the run in --out DIR: pass --out")
    overrides = O.limit_overrides(max_steps, step_timeout, episode_timeout, grade_timeout)
    spec = open_env(env, parse_kv(env_arg or [], "--env-arg"))
    tasks = spec.tasks(seed=seed, n=train_tasks, split=split)
    cfg = TrainConfig(
        steps=steps, groups_per_step=groups_per_step, group_size=group_size,
        max_staleness=max_staleness, sync=sync, concurrency=concurrency,
        checkpoint_every=checkpoint_every, checkpoint_every_s=checkpoint_every_s, seed=seed,
    )  # fmt: skip
    learner = open_learner(learner_name, spec, tasks, parse_kv(learner_arg or [], "--learner-arg"))
    run_dir = out_dir or default_out_dir("train", env, learner_name)
    episode_cfg = EpisodeConfig(
        overrides=overrides,
        max_retries=max_retries,
        model_failures=check_model_failures(model_failures),  # type: ignore[arg-type]
    )
    progress = TrainProgress(enabled=not no_progress and not as_json)

    async def run() -> tuple[TrainResult, Heldout | None]:
        from envlab.train.heldout import evaluate_heldout

        with progress:
            result = await train(
                spec, tasks, learner, out_dir=run_dir, config=cfg, episode_config=episode_cfg,
                resume=resume, observer=progress, command=["envlab", *sys.argv[1:]],
                backend=backend, address=address,
            )  # fmt: skip
        if eval_tasks == 0:
            return result, None
        held = spec.tasks(seed=seed, n=eval_tasks, split=eval_split)
        contenders = _contenders(learner_name, result, learner)
        try:
            return result, await evaluate_heldout(
                spec, held, contenders, run_dir / "eval", split=eval_split, seed=seed,
                concurrency=concurrency, config=episode_cfg, backend=backend, address=address,
            )  # fmt: skip
        finally:
            for c in contenders:
                await c.factory.aclose()

    with backend_session(backend, address, concurrency):  # Ray once: training, held-out
        result, heldout = run_async(run())
    if heldout is not None:
        (result.run_dir / HELDOUT_FILE).write_text(heldout.model_dump_json(indent=2))
    summary = totals(result.metrics)
    if as_json:
        payload = {"run_dir": str(result.run_dir), "plot": str(result.plot), "train": summary,
                   "heldout": None if heldout is None else heldout.model_dump(mode="json"),
                   "notes": result.notes}  # fmt: skip
        typer.echo(json.dumps(payload, indent=2))
        return
    _print(result, summary, heldout)


def _print(result: TrainResult, totals: dict[str, Any], heldout: Heldout | None) -> None:
    from rich.table import Table

    for note in result.notes:
        err().print(f"[yellow]note:[/] {note}")
    from envlab.report.training import TOTAL_LABELS

    t = Table(title=f"training: {result.run_dir}")
    t.add_column("")
    t.add_column("value", justify="right")
    for key, label in TOTAL_LABELS.items():
        value = totals.get(key, "-")
        if isinstance(value, dict):
            value = " ".join(f"{k}: {v}" for k, v in value.items())
        t.add_row(label, f"{value:.3f}" if isinstance(value, float) else str(value))
    out().print(t)
    if heldout is not None:
        for table in heldout_tables(heldout):
            out().print(table)
    out().print(f"reward curve: {result.plot}; report: envlab report {result.run_dir} -o r.html")


def heldout_tables(h: Heldout) -> list[Any]:
    """The held-out comparison for people: each contender, then the paired differences."""
    from rich.table import Table

    pct = f"{h.confidence:.0%}"
    rows = Table(title=f"held-out: {h.rows[0].n_tasks} tasks of split {h.split!r}")
    for col in ("policy", "mean reward", f"{pct} CI", "of best achievable", "gap closed",
                "excluded"):  # fmt: skip
        rows.add_column(col, justify="left" if col == "policy" else "right")

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for r in h.rows:
        frac = "-" if r.fraction_of_best is None else f"{r.fraction_of_best:.1%}"
        if r.fraction_low is not None and r.fraction_high is not None:
            frac += f" ({r.fraction_low:.1%} to {r.fraction_high:.1%})"
        ci = "-" if r.low is None else f"{f(r.low)} to {f(r.high)}"
        gap = "-" if r.gap_closed is None else f"{r.gap_closed:.1%}"
        rows.add_row(f"{r.name} ({r.agent})", f(r.mean), ci, frac, gap, str(r.n_excluded))
    paired = Table(title="paired on the same tasks (envlab compare A B)")
    for col in ("B - A", "difference", f"{pct} CI", "p-value"):
        paired.add_column(col, justify="left" if col == "B - A" else "right")
    for p in h.paired:
        ci = "-" if p.low is None else f"{p.low:+.3f} to {p.high:+.3f}"
        pv = "-" if p.p_value is None else f"{p.p_value:.2g}"
        paired.add_row(f"{p.b} - {p.a}", "-" if p.diff is None else f"{p.diff:+.3f}", ci, pv)
    return [rows, paired]
