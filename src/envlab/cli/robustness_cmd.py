"""``envlab robustness``: an agent on an environment clean and under each perturbation alone,
on the same tasks and run seed, with the paired drop of each and its confidence interval.

Runs go to ``DIR/clean`` and ``DIR/<perturbation>`` (each an ordinary run directory that
``envlab compare`` and ``envlab report`` read); the measurement to ``DIR/robustness.json``, the
charts to ``DIR/robustness.png`` and ``DIR/charts/``. Per perturbation: the drop
(clean - perturbed) over the tasks scored in both runs (``envlab.measure.compare``), the faults
injected (counted from each step's ``info["faults"]``), the episodes a safety gate zeroed, by
gate, clean vs perturbed, and the episodes excluded (infra and environment errors). An injected
fault is the environment's behaviour: what the agent does with it is scored, never excluded.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envlab.cli import options as O
from envlab.cli.console import run_async
from envlab.cli.options import ModelFailuresOption

if TYPE_CHECKING:
    from envlab.cli.evaluate import Evaluation
    from envlab.core import AgentFactory, EnvSpec, TaskSet
    from envlab.envs.perturb import Perturbation
    from envlab.report.robustness import PerturbationResult, Robustness, RunSide
    from envlab.rollout import EpisodeConfig

CLEAN = "clean"
_OWN_NOTES = ("forced:", "A (", "B (")
"""``compare_runs``' notes said once here (hidden answers read) or untrue (forced)."""
EXCLUDED = ("infra_error", "env_error")


def parse_each(text: str) -> list[Perturbation]:
    """The comma-separated perturbations of ``text``, each parsed alone: each is run alone, so
    one may appear at several levels (``stale=0.1,stale=0.5``)."""
    from envlab.envs.perturb import parse_perturbations

    items = [x for x in text.split(",") if x.strip()]
    return [p for x in items for p in parse_perturbations(x)] or parse_perturbations(text)


def run_names(perturbations: list[Perturbation]) -> list[str]:
    """Each perturbation's directory name: its ``name``, or, when two share a name
    (``stale=0.1,stale=0.5``), its description made a file name."""
    from envlab.core import ConfigError
    from envlab.runs import safe_name

    if not perturbations:
        raise ConfigError("--perturb names no perturbation; e.g. --perturb transient=0.3,stale=0.3")
    counts = Counter(p.name for p in perturbations)
    names = [p.name if counts[p.name] == 1 else safe_name(p.describe()) for p in perturbations]
    if len(set(names)) != len(names):
        raise ConfigError(f"--perturb names the same perturbation twice: {', '.join(names)}")
    return names


def check_out_dir(out_dir: Path, names: list[str], resume: bool) -> None:
    """Refuse, before running anything, a directory that holds a measurement unless ``resume``."""
    from envlab.core import ConfigError
    from envlab.report.robustness import ROBUSTNESS_FILE
    from envlab.runs import RUN_FILE, TRAJECTORIES_FILE

    if resume:
        return
    held = [
        n
        for n in (CLEAN, *names)
        for f in (RUN_FILE, TRAJECTORIES_FILE)
        if (out_dir / n / f).exists()
    ]
    if held or (out_dir / ROBUSTNESS_FILE).exists():
        what = ", ".join(dict.fromkeys(held)) or ROBUSTNESS_FILE
        raise ConfigError(
            f"{out_dir} already holds a robustness measurement ({what}). Pass --resume to finish "
            "it (same environment, agent, seed, tasks and samples), or choose another --out."
        )


def run_side(ev: Evaluation) -> RunSide:
    """The counts of one run: its scores, exclusions, gate trips and injected faults."""
    from envlab.report.robustness import RunSide
    from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore

    ids = {r.episode_id for r in ev.result.records}
    gates: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    faulted = 0
    store = TrajectoryStore(ev.result.run_dir / TRAJECTORIES_FILE)
    for traj in store.iter(messages=False):
        if traj.episode_id not in ids:
            continue
        if traj.gated_by is not None:
            gates[traj.gated_by] += 1
        faults = [f for step in traj.steps for f in _faults(step.info)]
        faulted += bool(faults)
        by_tool.update(str(f.get("tool")) for f in faults)
    s = ev.summary
    ci = s.mean_reward_ci
    return RunSide(
        run_dir=str(ev.result.run_dir),
        env_hash=ev.result.info.env_hash,
        n_episodes=s.n_episodes,
        n_scored=s.n_scored,
        mean=s.mean_reward,
        low=None if ci is None else ci.low,
        high=None if ci is None else ci.high,
        excluded={k: n for k in EXCLUDED if (n := s.status_counts.get(k, 0))},
        model_failed=s.n_model_failed,
        gates=dict(sorted(gates.items())),
        faults=sum(by_tool.values()),
        episodes_with_faults=faulted,
        faults_by_tool=dict(sorted(by_tool.items())),
    )


def _faults(info: dict[str, Any]) -> list[dict[str, Any]]:
    faults = info.get("faults") if isinstance(info, dict) else None
    return [f for f in faults if isinstance(f, dict)] if isinstance(faults, list) else []


def paired_drop(
    name: str, p: Perturbation, clean: RunSide, side: RunSide, confidence: float
) -> PerturbationResult:
    """The drop ``clean - perturbed`` over the tasks both runs scored (``compare_runs``)."""
    from envlab.core import ConfigError
    from envlab.measure.compare import compare_runs
    from envlab.report.robustness import PerturbationResult, drop_verdict

    result = PerturbationResult(name=name, perturbation=p.describe(), run=side)
    if side.n_episodes and not side.faults:
        result.notes.append(
            f"no fault was injected: {p.describe()} found nothing to act on in these episodes "
            "(a rate too low for so few calls, or no tool it applies to was called)"
        )
    try:
        # the perturbed environment's hash differs from the clean one by the perturbation
        # alone: this command built it from the clean spec
        cmp = compare_runs(clean.run_dir, side.run_dir, confidence=confidence, force=True)
    except ConfigError as e:
        result.verdict = f"no paired drop: {e}"
        return result
    d = cmp.paired
    result.n_shared, result.scale, result.unit = cmp.n_shared, cmp.scale, cmp.unit
    result.drop = 0.0 - d.diff  # + 0.0: never "-0.0"
    result.low = None if d.high is None else 0.0 - d.high
    result.high = None if d.low is None else 0.0 - d.low
    result.p_value, result.test, result.significant = cmp.p_value, cmp.test, cmp.significant
    result.notes += [n for n in dict.fromkeys(cmp.notes) if not n.startswith(_OWN_NOTES)]
    result.verdict = drop_verdict(result, confidence, identical=d.sd_diff == 0)
    return result


async def measure_robustness(
    spec: EnvSpec,
    factory: AgentFactory,
    tasks: TaskSet,
    perturbations: list[Perturbation],
    out_dir: Path,
    *,
    split: str,
    samples: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    resume: bool = False,
    config: EpisodeConfig | None = None,
    confidence: float = 0.95,
    progress: bool = False,
    backend: str = "local",
    address: str | None = None,
) -> Robustness:
    """Run the clean and each perturbed run (resumable; each on ``backend``, one Ray
    connection for all), measure, write ``robustness.json`` and the charts. ``factory`` is the
    caller's to close."""
    from envlab.cli.evaluate import evaluate
    from envlab.cli.progress import RunProgress
    from envlab.envs.perturb import perturb
    from envlab.report.robustness import Robustness
    from envlab.rollout.driver import backend_session

    names = run_names(perturbations)
    check_out_dir(out_dir, names, resume)
    specs = [
        (CLEAN, spec),
        *((n, perturb(spec, [p])) for n, p in zip(names, perturbations, strict=True)),
    ]
    sides: dict[str, RunSide] = {}
    with backend_session(backend, address, concurrency):
        for name, s in specs:
            with (bar := RunProgress(description=name, enabled=progress)):
                ev = await evaluate(
                    s, factory, tasks, out_dir=out_dir / name, samples=samples, seed=seed,
                    concurrency=concurrency, resume=resume, config=config, observer=bar,
                    command=["envlab", *sys.argv[1:]], backend=backend, ray_address=address,
                )  # fmt: skip
            sides[name] = run_side(ev)
    clean = sides[CLEAN]
    results = [
        paired_drop(n, p, clean, sides[n], confidence)
        for n, p in zip(names, perturbations, strict=True)
    ]
    r = Robustness(
        env=spec.name, agent=factory.spec.model_id or factory.spec.name,
        privileged=factory.spec.privileged, seed=seed, split=split, n_tasks=len(tasks),
        samples=samples, confidence=confidence, clean=clean, perturbations=results,
    )  # fmt: skip
    if r.privileged:
        r.notes.append(f"{r.agent} read hidden answers: a check of the environment, not a skill")
    if clean.faults:
        r.notes.append(f"the clean run recorded {clean.faults} faults: it is not clean")
    failed = clean.model_failed + sum(p.run.model_failed for p in results)
    if config is not None and config.model_failures == "exclude":
        r.notes.append(
            f"model failures excluded (--model-failures exclude): {failed} episodes the agent's "
            "model endpoint failed are left out, not scored 0"
        )
    elif failed:
        r.notes.append(f"{failed} episodes the agent's model endpoint failed: scored 0, its own")
    return _write(r, out_dir)


def _write(r: Robustness, out_dir: Path) -> Robustness:
    import os

    from envlab.report.robustness import ROBUSTNESS_FILE, draw_charts

    note = draw_charts(r, out_dir)
    if note is not None:
        r.notes.append(note)
    path = out_dir / ROBUSTNESS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(r.model_dump_json(indent=2))
    os.replace(tmp, path)
    return r


def print_robustness(r: Robustness, out_dir: Path) -> None:
    """The table: one row per run; under it each perturbation's verdict and the notes."""
    from rich.markup import escape
    from rich.table import Table

    from envlab.cli.console import out
    from envlab.report.robustness import in_units, p_text

    unit = r.perturbations[0].unit if r.perturbations else ""
    table = Table(
        title=f"{escape(r.env)} / {escape(r.agent)}: robustness, {r.n_tasks} tasks",
        caption=f"drop = clean - perturbed{f' in {unit}' if unit else ''}, paired by task, "
        f"{r.confidence:.0%} CI; faults (episodes with one); gates: episodes a gate zeroed",
    )
    longest = max([len(CLEAN), *(len(p.perturbation) for p in r.perturbations)])
    table.add_column("run", no_wrap=True, min_width=longest)
    for col in ("faults", "mean", "drop", "CI", "p", "gates", "excluded"):
        table.add_column(col, justify="left" if col == "gates" else "right")
    c = r.clean
    table.add_row(CLEAN, str(c.faults), _mean(c), "", "", "", _gates(c.gates), _excl(c))
    for p in r.perturbations:
        ci = "-" if p.low is None else f"{in_units(p.low, p)} to {in_units(p.high, p)}"
        pv = "-" if p.p_value is None else p_text(p.p_value)
        table.add_row(escape(p.perturbation), f"{p.run.faults} ({p.run.episodes_with_faults})",
                      _mean(p.run), in_units(p.drop, p), ci, pv, _gates(p.run.gates),
                      _excl(p.run))  # fmt: skip
    console = out()
    console.print(table)
    for p in r.perturbations:
        console.print(f"{escape(p.perturbation)}: {escape(p.verdict)}", soft_wrap=True)
        for n in p.notes:
            console.print(f"  note: {escape(n)}", soft_wrap=True)
    for n in r.notes:
        console.print(f"note: {escape(n)}", soft_wrap=True)
    runs = " ".join(str(out_dir / n) for n in (CLEAN, *(p.name for p in r.perturbations)))
    console.print(
        f"the report: envlab report {escape(runs)} --out {out_dir}/report.html", soft_wrap=True
    )


def _mean(s: RunSide) -> str:
    if s.mean is None:
        return "-"
    return f"{s.mean:.3f}"


def _gates(g: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in g.items()) or "none"


def _excl(s: RunSide) -> str:
    return ", ".join(f"{k} {v}" for k, v in s.excluded.items()) or "0"


def robustness_cmd(
    env: Annotated[str, typer.Argument(metavar="ENV", help="Environment (as for `envlab eval`).")],
    agent: Annotated[
        str,
        typer.Option("--agent", "-a", metavar="AGENT", help="Agent name (see `envlab agents`)."),
    ],
    perturb_text: Annotated[
        str,
        typer.Option(
            "--perturb",
            "-p",
            metavar="NAME=VALUE,...",
            help="Perturbations, each run alone: e.g. transient=0.3,stale=0.3.",
        ),
    ],
    tasks: Annotated[
        int | None, typer.Option("--tasks", "-n", help="Number of tasks (default all).")
    ] = None,
    samples: Annotated[int, typer.Option("--samples", "-k", help="Samples per task.")] = 1,
    concurrency: O.ConcurrencyOption = 8,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="DIR", help="Measurement directory.")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted measurement in --out.")
    ] = False,
    seed: O.SeedOption = 0,
    split: Annotated[str, typer.Option("--split", help="Task split.")] = "test",
    env_arg: O.EnvArgOption = None,
    agent_arg: O.AgentArgOption = None,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Steps per episode (default: the task's).")
    ] = None,
    max_retries: O.MaxRetriesOption = 2,
    confidence: O.ConfidenceOption = 0.95,
    model_failures: ModelFailuresOption = "agent",
    backend: O.BackendOption = "local",
    address: O.AddressOption = None,
    as_json: O.JsonOption = False,
    no_progress: O.NoProgressOption = False,
) -> None:
    """Run AGENT on ENV clean and under each perturbation alone; the paired drop of each."""
    from envlab.cli.options import (
        check_model_failures,
        limit_overrides,
        open_agent,
        open_env,
        parse_kv,
    )
    from envlab.cli.run_dirs import default_out_dir
    from envlab.core.errors import ConfigError
    from envlab.rollout import EpisodeConfig
    from envlab.rollout.driver import check_backend

    if tasks is not None and tasks < 1:
        raise ConfigError(f"--tasks must be >= 1, got {tasks}")
    check_backend(backend, address)
    if not 0 < confidence < 1:
        raise ConfigError(f"--confidence must lie in (0, 1), got {confidence}")
    perturbations = parse_each(perturb_text)
    spec = open_env(env, parse_kv(env_arg or [], "--env-arg"))
    task_set = spec.tasks(seed=seed, n=tasks, split=split)
    out_dir = out_dir or default_out_dir("robustness", env, agent)
    config = EpisodeConfig(
        overrides=limit_overrides(max_steps, None, None, None),
        max_retries=max_retries,
        model_failures=check_model_failures(model_failures),  # type: ignore[arg-type]
    )

    async def run() -> Robustness:
        factory = open_agent(agent, parse_kv(agent_arg or [], "--agent-arg"))
        try:
            return await measure_robustness(
                spec, factory, task_set, perturbations, out_dir, split=split, samples=samples,
                concurrency=concurrency, seed=seed, resume=resume, config=config,
                confidence=confidence, progress=not no_progress and not as_json,
                backend=backend, address=address,
            )  # fmt: skip
        finally:
            await factory.aclose()

    r = run_async(run())
    if as_json:
        typer.echo(json.dumps({"out_dir": str(out_dir), **r.model_dump(mode="json")}, indent=2))
    else:
        print_robustness(r, out_dir)
    if r.clean.n_scored == 0 or any(p.run.n_scored == 0 for p in r.perturbations):
        raise typer.Exit(1)
