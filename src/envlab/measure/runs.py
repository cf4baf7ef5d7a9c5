"""Run directories as measurement reads them: ``run.json``, trajectories, ``summary.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from envlab.core import EpisodeRecord, NotFoundError, StoreError, Trajectory
from envlab.measure.summary import CIMethod, Summary, summarize
from envlab.rollout import RUN_FILE, TRAJECTORIES_FILE, RunInfo, TrajectoryStore, load_run_info

SUMMARY_FILE = "summary.json"


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
        )

    def rewards_by_task(self) -> dict[str, list[float]]:
        """The scored rewards of each task (tasks with none are left out)."""
        out: dict[str, list[float]] = {}
        for r in self.records:
            if r.scored and r.reward is not None:
                out.setdefault(r.task_id, []).append(r.reward)
        return out


def load_run(path: str | Path, *, trajectories: bool = False) -> Run:
    """Read a run directory written by ``envlab eval --out``.

    The pass threshold and gating tasks come from its ``summary.json`` when there is one, so a
    comparison or report judges passes the way the run did.
    """
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise NotFoundError(
            f"no run directory at {run_dir}: pass a directory written by `envlab eval --out DIR`"
        )
    if not (run_dir / RUN_FILE).exists():
        raise StoreError(
            f"{run_dir} is not a run directory: it has no {RUN_FILE}. "
            "Pass a directory written by `envlab eval --out DIR`."
        )
    info = load_run_info(run_dir)
    store = TrajectoryStore(run_dir / TRAJECTORIES_FILE)
    trajs = store.load()
    notes = []
    if store.dropped_torn_line is not None:
        notes.append(f"{run_dir}: ignored a torn last line of {TRAJECTORIES_FILE}")
    if not trajs:
        raise StoreError(
            f"{run_dir} holds no episodes yet ({TRAJECTORIES_FILE} is missing or empty). "
            f"Finish it with `envlab eval ... --out {run_dir} --resume`."
        )
    threshold, must_pass = 1.0, None
    summary_file = run_dir / SUMMARY_FILE
    if summary_file.exists():
        try:
            data = json.loads(summary_file.read_text())
            threshold = float(data.get("pass_threshold", 1.0))
            gate = data.get("gate") or {}
            must_pass = list(gate["must_pass"]) if gate.get("must_pass") else None
        except (ValueError, TypeError, KeyError):
            notes.append(f"{summary_file} is unreadable; assuming pass threshold 1.0, no gate")
    return Run(
        path=run_dir,
        info=info,
        records=[t.record() for t in trajs],
        trajectories=trajs if trajectories else None,
        pass_threshold=threshold,
        must_pass=must_pass,
        notes=notes,
    )
