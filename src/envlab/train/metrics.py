"""What a train run records per learner step (``metrics.jsonl``) and its plot (``reward.png``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envlab.core import StoreError

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "reward.png"


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


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_rewards(metrics: list[StepMetrics], path: Path, *, title: str = "") -> Path | None:
    """Batch reward per learner step and against wall time (a moving average over the batch
    means), with the dead-group fraction: ``reward.png``. ``None`` without metrics."""
    if not metrics:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m.step for m in metrics]
    rewards = [m.reward_mean for m in metrics]
    window = max(1, len(metrics) // 20)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    ax1.plot(steps, rewards, color="#9db4d8", lw=1, label="batch mean")
    ax1.plot(steps, _smooth(rewards, window), color="#1f4e9c", lw=2, label=f"mean of {window}")
    ax1.plot(steps, [m.dead_groups for m in metrics], color="#c77", lw=1, label="dead groups")
    ax1.set_xlabel("learner step")
    ax1.set_ylabel("reward (training batches)")
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend(loc="lower right", fontsize=8)
    ax2.plot([m.elapsed_s for m in metrics], _smooth(rewards, window), color="#1f4e9c", lw=2)
    ax2.set_xlabel("seconds")
    ax2.set_ylim(-0.02, 1.02)
    ax2.set_title(f"{metrics[-1].episodes} episodes", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def summary(metrics: list[StepMetrics]) -> dict[str, Any]:
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


def dump_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
