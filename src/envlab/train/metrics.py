"""The reward-over-time plot of a train run (``reward.png``) and its totals."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from envlab.runs.metrics import StepMetrics


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


def dump_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON atomically (a temporary file, then a rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
