"""Run directories as measurement reads them: ``run.json``, trajectories, ``summary.json``.

The directory format is :mod:`envlab.runs`; this module adds what measurement takes from it
(the pass threshold and gating tasks the run was summarised with).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from envlab.core import EpisodeRecord, Trajectory
from envlab.measure.summary import CIMethod, Summary, summarize
from envlab.runs import SUMMARY_FILE, RunDir, RunInfo

__all__ = ["SUMMARY_FILE", "Run", "load_run"]


@dataclass(slots=True)
class Run:
    """A finished (or partial) run directory, loaded for measurement."""

    path: Path
    info: RunInfo
    records: list[EpisodeRecord]
    trajectories: list[Trajectory] | None = None
    """Whole trajectories, when loaded with ``trajectories=True``."""
    pass_threshold: float = 1.0
    must_pass: list[str] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    def summarize(self, *, confidence: float = 0.95, ci_method: CIMethod = "clt") -> Summary:
        return summarize(
            self.records,
            pass_threshold=self.pass_threshold,
            confidence=confidence,
            ci_method=ci_method,
            must_pass=self.must_pass,
            model_failures=self.info.episode_config.get("model_failures", "agent"),
        )

    def rewards_by_task(self) -> dict[str, list[float]]:
        """The scored rewards of each task (tasks with none are left out)."""
        out: dict[str, list[float]] = {}
        for r in self.records:
            if r.scored and r.reward is not None:
                out.setdefault(r.task_id, []).append(r.reward)
        return out


def load_run(path: str | Path, *, trajectories: bool = False) -> Run:
    """Read a run directory written by ``envlab eval --out``: the light record of each episode
    (streamed: whole trajectories are never all in memory), or with ``trajectories`` them too.

    The pass threshold and gating tasks come from its ``summary.json`` when there is one, so a
    comparison or report judges passes the way the run did.
    """
    run_dir = RunDir(path)
    trajs = list(run_dir.trajectories()) if trajectories else None
    records = [t.record() for t in trajs] if trajs else run_dir.records()
    notes = run_dir.notes
    threshold, must_pass, note = _summary_settings(run_dir.path / SUMMARY_FILE)
    if note:
        notes.append(note)
    return Run(
        path=run_dir.path,
        info=run_dir.info,
        records=records,
        trajectories=trajs,
        pass_threshold=threshold,
        must_pass=must_pass,
        notes=notes,
    )


def _summary_settings(path: Path) -> tuple[float, list[str] | None, str | None]:
    """``(pass threshold, gating tasks, note)`` from a ``summary.json`` (defaults without one)."""
    if not path.exists():
        return 1.0, None, None
    try:
        data = json.loads(path.read_text())
        threshold = float(data.get("pass_threshold", 1.0))
        gate = data.get("gate") or {}
        must_pass = list(gate["must_pass"]) if gate.get("must_pass") else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return 1.0, None, f"{path} is unreadable; assuming pass threshold 1.0, no gate"
    return threshold, must_pass, None
