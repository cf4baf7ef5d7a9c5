"""An export that would write no row fails, saying why there are none and what to do.

A file of 0 rows is no dataset (``datasets`` cannot even load an empty Parquet or JSON Lines
file), so ``export_run`` writes nothing and raises ``EmptyExportError`` (a ``ConfigError``:
``envlab export`` exits 2) with the counts of the run and a hint for each reason rows were
left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envlab.core import ConfigError

if TYPE_CHECKING:
    from envlab.export.export import ExportOptions, ExportReport

HINTS: dict[str, str] = {
    "below --min-reward": "lower --min-reward (sft takes episodes at or above it)",
    "group of one (no pair)": "sample each task more than once (envlab eval --samples 2 or more)",
    "margin below --min-margin": (
        "lower --min-margin, or sample each task more (--samples) so that its best and worst "
        "samples differ"
    ),
    "chosen and rejected start from different prompts": (
        "the samples of a task saw different prompts (another system prompt or tools): "
        "export grpo or sft instead"
    ),
    "in a dead group (--drop-dead)": (
        "every group has no reward variance: leave out --drop-dead (dead groups are exported "
        "with advantage 0), sample each task more (--samples), or pick tasks the model "
        "sometimes passes and sometimes fails"
    ),
    "no token view": (
        "no scored episode has a token view: run an agent whose server returns token ids "
        "(the embedded smollm2, or a vLLM/SGLang server that returns prompt_token_ids and "
        "token_ids), or export grpo (messages, no ids)"
    ),
}


class EmptyExportError(ConfigError):
    """The export would have written no row; no file was written."""


def why_empty(report: ExportReport, opts: ExportOptions) -> str:
    """The message of an export that found no row to write."""
    head = f"nothing to export as {opts.format}: no row, so no file was written to {report.out}"
    if report.n_episodes == 0:
        return f"{head}. The run has no episodes: run it first (envlab eval ... --out RUN)."
    unscored = sum(report.unscored.values())
    if unscored == report.n_episodes:
        by = ", ".join(f"{n} {s}" for s, n in sorted(report.unscored.items()))
        return (
            f"{head}. None of the run's {report.n_episodes} episodes was scored ({by}): "
            "infra and env errors are never training rows. Fix what failed (envlab report RUN "
            "shows the errors) and finish the run with envlab eval ... --resume."
        )
    scored = report.n_episodes - unscored
    unit = " (counted by group)" if opts.format in ("dpo", "verl") else ""
    parts = [f"{why} ({n})" for why, n in report.skipped.most_common()]
    left = "left out: " + "; ".join(parts) + unit if parts else "none was selected"
    hints = [HINTS[why] for why in report.skipped if why in HINTS]
    todo = "; or ".join(hints) if hints else "check the export's options"
    return f"{head}. Of {scored} scored episodes ({unscored} unscored): {left}. To export: {todo}."
