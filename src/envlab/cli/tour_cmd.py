"""``envlab tour``: the README's main job. Vets four environments (three with planted flaws),
trains the decision model on ``triage``, measures it on held-out tasks against baselines and the
embedded language model, and writes one HTML report (``envlab.tour``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envlab.cli.console import err, out, run_async

if TYPE_CHECKING:
    from rich.table import Table

    from envlab.tour.run import TourResult


def tour_cmd(
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="A new directory for the tour's runs.")
    ] = None,
    steps: Annotated[
        int, typer.Option("--steps", help="Learner steps of the decision model.")
    ] = 40,
    heldout_tasks: Annotated[
        int, typer.Option("--heldout-tasks", help="Held-out triage tasks for the baselines.")
    ] = 200,
    model_tasks: Annotated[
        int, typer.Option("--model-tasks", help="Held-out tasks the embedded model answers.")
    ] = 8,
    no_model: Annotated[
        bool, typer.Option("--no-model", help="Leave the embedded language model out.")
    ] = False,
) -> None:
    """Vet environments, train a policy and measure it honestly: what envlab is for, in a few
    minutes, offline."""
    from envlab.cli.run_dirs import default_out_dir
    from envlab.core.errors import ConfigError
    from envlab.tour.run import TourConfig, run_tour

    target = out_dir or default_out_dir("tour")
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"--out {target} is not empty: name a new directory")
    if min(steps, heldout_tasks, model_tasks) < 1:
        raise ConfigError("--steps, --heldout-tasks and --model-tasks must be at least 1")
    if not no_model:
        from envlab.models.local import require_local

        require_local("envlab tour (or pass --no-model)")
        from envlab.models.weights import smollm2_path

        smollm2_path()  # the model's file, found before anything runs
    cfg = TourConfig(target, steps, heldout_tasks, min(model_tasks, heldout_tasks), not no_model)
    t0 = time.monotonic()

    def say(line: str) -> None:
        err().print(f"[dim]{time.monotonic() - t0:5.0f}s[/]  {line}")

    result = run_async(run_tour(cfg, say))
    _print(result, time.monotonic() - t0)


def _print(result: TourResult, elapsed: float) -> None:
    from rich.table import Table

    console = out()
    t = Table(title="1. vetting: which environments survive (probe agents, no model)")
    for col in ("environment", "planted flaw", "verdict (check)"):
        t.add_column(col, overflow="fold")
    for row in result.vet:
        checks = ", ".join(dict.fromkeys(r.split(":")[0] for r in row.reasons))
        verdict = ", ".join(f"{k} {v}" for k, v in row.verdicts.items())
        t.add_row(row.env_id, row.planted, f"{verdict} ({checks})" if checks else verdict)
    console.print(t)
    for row in result.vet:
        if row.reasons:
            console.print(f"  {row.env_id}: {_cut(row.reasons[0], 160)}", highlight=False)
    console.print(
        f"2. training: the decision model, {len(result.train.metrics)} learner steps on triage "
        f"({result.train.run_dir})"
    )
    console.print(_heldout_table(result))
    console.print(
        "  trained: the decision model above, greedy; random: uniform over the options; optimum:"
        " the Bayes action (the exact best); SmolLM2-135M: the embedded model, zero-shot",
        highlight=False,
    )
    for note in result.notes:
        err().print(f"[yellow]note:[/] {note}")
    console.print(f"done in {elapsed:.0f} s. Report: {result.report}")


def _heldout_table(result: TourResult) -> Table:
    """3. each policy's held-out mean, and its paired difference from the trained policy."""
    from rich.table import Table

    t = Table(title="3. held-out triage tasks: each policy, and the trained one minus it")
    for col in ("policy", "tasks", "mean", "95% CI", "trained - it", "95% CI "):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for h in (result.heldout, result.model_heldout):
        if h is None:
            continue
        paired = {p.a: p for p in h.paired}
        for r in h.rows:
            if r.name == "trained" and h is result.model_heldout:
                continue
            p = paired.get(r.name)
            t.add_row(
                LABELS.get(r.name, r.name), str(r.n_tasks), _num(r.mean), _ci(r.low, r.high),
                _num(p and p.diff, "+"), _ci(p and p.low, p and p.high, "+"),
            )  # fmt: skip
    return t


LABELS = {"smollm2": "SmolLM2-135M"}


def _num(x: float | None, sign: str = "") -> str:
    return "-" if x is None else f"{x:{sign}.3f}"


def _ci(low: float | None, high: float | None, sign: str = "") -> str:
    return "-" if low is None or high is None else f"[{low:{sign}.3f}, {high:{sign}.3f}]"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
