"""The ``envlab eval`` table: each number with its confidence interval on one row, the counts,
the reward components; under it why episodes failed, and where to look next."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from envlab.cli.console import err, out

if TYPE_CHECKING:
    from rich.console import Console

    from envlab.cli.evaluate import Evaluation
    from envlab.measure.stats import Estimate
    from envlab.measure.summary import Summary

_METHOD = {
    "clustered-t": "clustered by task",
    "clustered-z": "clustered by task",
    "bootstrap": "bootstrap over tasks",
    "wilson": "Wilson",
    "exact": "exact",
}


def with_ci(value: float | None, e: Estimate | None, confidence: float = 0.95) -> str:
    """``0.420 (95% CI 0.310-0.530)``; ``-`` when there is no value."""
    if value is None:
        return "-"
    if e is None or e.low is None or e.high is None:
        return f"{value:.3f} (one task: no interval)"
    return f"{value:.3f} ({confidence * 100:g}% CI {e.low:.3f}-{e.high:.3f})"


def summary_rows(summary: Summary) -> list[tuple[str, str]]:
    """The scores of a run, one row per number, each with its interval."""
    c = summary.confidence
    rows = [("mean reward", with_ci(summary.mean_reward, summary.mean_reward_ci, c))]
    if summary.pass_rate is not None and summary.pass_rate != summary.mean_reward:
        rows.append(
            (f"pass rate (reward >= {summary.pass_threshold:g})",
             with_ci(summary.pass_rate, summary.pass_rate_ci, c))
        )  # fmt: skip
    for k, v in summary.pass_at_k.items():
        rows.append((f"pass@{k}", with_ci(v, summary.pass_at_k_ci.get(k), c)))
    for k, v in summary.pass_hat_k.items():
        if k > 1:
            rows.append((f"pass^{k}", with_ci(v, summary.pass_hat_k_ci.get(k), c)))
    if summary.gate is not None:
        rows.append(("gate (must-pass tasks)", summary.gate.describe()))
    return rows


def model_failures_row(summary: Summary) -> tuple[str, str]:
    """How many episodes the agent's model endpoint failed, and what the run did with them."""
    if summary.model_failures == "exclude":
        how = "[yellow]excluded: this run excludes model failures (--model-failures exclude)[/]"
    else:
        how = "scored 0: the agent's"
    return "model failures", f"{summary.n_model_failed} ({how})"


def _caption(summary: Summary) -> str | None:
    est = summary.mean_reward_ci
    if est is None or est.low is None:
        return None
    how = _METHOD.get(est.method)
    return f"intervals counted in {est.clusters} tasks" + (f", {how}" if how else "")


def evaluation_table(ev: Evaluation, env: str) -> Table:
    s, r = ev.summary, ev.result
    table = Table(title=f"{escape(env)} / {escape(r.info.agent.name)}", caption=_caption(s))
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("tasks", str(s.n_tasks))
    ok = s.status_counts.get("ok", 0)
    table.add_row("episodes (ok, scored)", f"{s.n_episodes} ({ok} ok, {s.n_scored} scored)")
    for name, value in summary_rows(s):
        table.add_row(name, value)
    for name, mean in ev.details.components.items():
        table.add_row(f"component {escape(name)} (mean)", f"{mean:.3f}")
    for status, n in s.status_counts.items():
        if status != "ok" and n:
            table.add_row(f"status {status}", str(n))
    table.add_row("grader failed (scored 0)", str(s.n_grader_failed))
    table.add_row(*model_failures_row(s))
    table.add_row("tool-call errors", str(s.tool_errors))
    table.add_row("new / resumed episodes", f"{r.new_episodes} / {r.skipped_episodes}")
    table.add_row("wall time", f"{r.elapsed_s:.1f}s")
    return table


def print_failures(ev: Evaluation, *, to_stderr: bool = False) -> None:
    """The first error of each failure status, and, when nothing was scored, that it wasn't."""
    console = err() if to_stderr else out()
    counts = {**ev.summary.status_counts, "grader_failed": ev.summary.n_grader_failed}
    first = ev.details.first_errors
    if first:
        console.print("[bold]why episodes failed[/] (the first of each):")
    for status, why in first.items():
        console.print(f"  [red]{status}[/] ({counts.get(status, 0)}): {escape(why)}")
    _timeout_hint(ev, console)
    if ev.every_model_failed and not ev.nothing_scored:
        err().print(
            f"[bold red]the model endpoint failed in all {ev.summary.n_episodes} episodes:[/] "
            "each is scored 0 as the agent's failure. Check the endpoint's URL, model name and "
            "API key, and that the server is up (envlab serve-model for the built-in one)."
        )
    if ev.nothing_scored:
        n = ev.summary.n_episodes
        err().print(
            f"[bold red]nothing was scored:[/] all {n} episodes ended in "
            f"{' or '.join(k for k, v in ev.summary.status_counts.items() if v)}, so these numbers "
            "measure nothing. Fix the cause above, then run again (with --out "
            f"{escape(str(ev.result.run_dir))} --resume to rerun only those episodes)."
        )


def _timeout_hint(ev: Evaluation, console: Console) -> None:
    """Episodes of a model agent that ran out of time: where the time went, what to change."""
    n = ev.summary.status_counts.get("timeout", 0)
    endpoint = ev.result.info.agent.endpoint
    if not n or not endpoint:
        return
    faster = "use a faster engine (pip install -e '.[local]': llama.cpp)"
    if endpoint.startswith("in-process"):  # its queue is off the clock: the generation was slow
        advice = (
            f"the embedded model's own generation took longer than the step limit (its wait "
            f"for the shared model is not counted): allow each step more time "
            f"(--step-timeout 300) or {faster}."
        )
    else:
        advice = (
            "a server that answers one request at a time (envlab serve-model, llama.cpp's) "
            "queues the episodes in flight: run fewer at once (--concurrency 1), allow each "
            f"step more time (--step-timeout 300), or {faster}."
        )
    console.print(
        f"[yellow]hint:[/] {n} of {ev.summary.n_episodes} episodes ran out of time waiting on "
        f"the model at {escape(endpoint)} (its time is the agent's: scored 0); {escape(advice)}"
    )


def print_notes(ev: Evaluation) -> None:
    for note in ev.result.notes:
        err().print(f"[yellow]note:[/] {escape(note)}")
    if ev.result.info.agent.privileged:
        err().print(
            "[yellow]note:[/] a privileged agent read hidden answers: this checks the "
            "environment, not an agent's skill."
        )


def print_evaluation(ev: Evaluation, env: str) -> None:
    out().print(evaluation_table(ev, env))
    print_failures(ev)
    print_notes(ev)
    if not ev.nothing_scored:
        run = escape(str(ev.result.run_dir))
        out().print(
            f"every episode, step by step: [bold]envlab report {run} --out {run}/report.html[/]"
        )
