"""The per-step metrics of a train run (``metrics.jsonl``), read and written here, below the
trainer that writes them and the report that shows them, with the names of a train run's other
files (``reward.png``, ``heldout.json``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envlab.core import StoreError

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "reward.png"
HELDOUT_FILE = "heldout.json"
"""The held-out comparison ``envlab train`` measured after training."""


class StepMetrics(BaseModel):
    """One learner step: one line of ``metrics.jsonl``."""

    step: int
    """The learner step just taken (1 for the first); the policy's version after it."""
    elapsed_s: float
    """Seconds of training so far (resumed runs add up their segments)."""
    episodes: int
    """Episodes finished so far, every status."""
    episodes_per_s: float
    """Episodes finished per second since the previous step."""
    learner_s: float
    """Seconds this step's ``learner.step`` took."""
    reward_mean: float
    reward_std: float
    groups: int
    samples: int
    dead_groups: float
    """Fraction of this batch's groups whose samples all got the same reward (no signal)."""
    staleness: dict[str, int] = Field(default_factory=dict)
    """Samples of this batch by staleness: ``learner version at the step - policy version``."""
    dropped_stale: int = 0
    """Groups dropped so far for being older than ``max_staleness`` (run total)."""
    dropped_groups: int = 0
    """Groups dropped so far for having fewer than two validly graded samples (run total)."""
    excluded_samples: int = 0
    """Samples kept out of batches so far: infra or env errors, never the agent's (run total)."""
    learner: dict[str, float] = Field(default_factory=dict)
    """What ``learner.step`` returned (loss, entropy, ...)."""


def append_metrics(path: Path, metrics: StepMetrics) -> None:
    """Append one line and flush it to the OS (a killed run keeps every line written)."""
    try:
        with path.open("a") as f:
            f.write(metrics.model_dump_json() + "\n")
    except OSError as e:
        raise StoreError(f"cannot append to {path}: {e.strerror or e}") from e


def read_metrics(path: Path) -> list[StepMetrics]:
    """Every line of ``metrics.jsonl``; a torn last line (a kill mid-write) is left out."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(StepMetrics.model_validate_json(line))
        except ValueError:
            if i == len(lines) - 1:
                break
            raise StoreError(
                f"{path}:{i + 1}: corrupt metrics line; restore or delete it"
            ) from None
    return out


def truncate(path: Path, size: int) -> None:
    """Cut ``path`` back to ``size`` bytes (what a checkpoint saw): steps after it are redone."""
    if path.exists() and path.stat().st_size > size:
        with path.open("r+b") as f:
            f.truncate(size)
            os.fsync(f.fileno())


def totals(metrics: list[StepMetrics]) -> dict[str, Any]:
    """The run's totals for ``--json`` and the closing table."""
    if not metrics:
        return {"steps": 0}
    last = metrics[-1]
    hist: dict[str, int] = {}
    for m in metrics:
        for k, v in m.staleness.items():
            hist[k] = hist.get(k, 0) + v
    return {
        "steps": last.step,
        "episodes": last.episodes,
        "elapsed_s": round(last.elapsed_s, 2),
        "first_reward": metrics[0].reward_mean,
        "last_reward": last.reward_mean,
        "staleness": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
        "dropped_stale": last.dropped_stale,
        "dropped_groups": last.dropped_groups,
        "excluded_samples": last.excluded_samples,
        "dead_groups": sum(m.dead_groups for m in metrics) / len(metrics),
    }
