"""``envlab eval`` as a function: roll out an agent into a run directory, then summarise it.

The orchestration layer: it calls the engine (``envlab.rollout.rollout``) and measurement
(``envlab.measure.summarize``), which never import each other. Usable from Python::

    spec = load_env("calc"); agent = load_agent("oracle")
    ev = await evaluate(spec, agent, spec.tasks(n=5), out_dir="runs/calc-oracle")
    await agent.aclose()
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from envlab.core import AgentFactory, EnvSpec, TaskSet, Trajectory
from envlab.core.text import headline

if TYPE_CHECKING:
    from envlab.measure.summary import Summary
    from envlab.rollout import EpisodeConfig, RolloutResult, RunObserver


class _Seen(NamedTuple):
    status: str
    components: dict[str, float]
    error: str | None
    grader_failed: str | None


@dataclass(slots=True)
class EpisodeDetails:
    """What the summary's light records leave out: the mean of each reward component over
    the scored episodes, and the first error of each failure status."""

    episodes: dict[str, _Seen] = field(default_factory=dict)

    def add(self, traj: Trajectory) -> None:
        status = traj.status.value
        self.episodes[traj.episode_id] = _Seen(
            status,
            traj.components if traj.scored else {},
            describe_error(traj) if status != "ok" else None,
            traj.grader_failed.strip().splitlines()[0] if traj.grader_failed else None,
        )

    def only(self, episode_ids: set[str]) -> EpisodeDetails:
        return EpisodeDetails({k: v for k, v in self.episodes.items() if k in episode_ids})

    @property
    def components(self) -> dict[str, float]:
        """The mean of each reward component over the scored episodes that report it."""
        sums: dict[str, list[float]] = {}
        for e in self.episodes.values():
            for name, value in e.components.items():
                sums.setdefault(name, []).append(value)
        return {k: sum(v) / len(v) for k, v in sorted(sums.items())}

    @property
    def first_errors(self) -> dict[str, str]:
        """``status`` (or ``grader_failed``) -> why the first such episode failed."""
        first: dict[str, str] = {}
        for e in self.episodes.values():
            if e.error is not None:
                first.setdefault(e.status, e.error)
            if e.grader_failed is not None:
                first.setdefault("grader_failed", headline(e.grader_failed))
        return first


def describe_error(traj: Trajectory) -> str:
    """``timeout in act: the step took 61s, over 60s`` (``kind in phase: headline``)."""
    e = traj.error
    if e is None:
        return f"{traj.status.value} after {traj.n_steps} steps (no error recorded)"
    return e.describe()


@dataclass(slots=True)
class Evaluation:
    result: RolloutResult
    summary: Summary
    details: EpisodeDetails

    @property
    def nothing_scored(self) -> bool:
        """True when no episode got a valid grade (every one ``infra_error``/``env_error``)."""
        return self.summary.n_scored == 0

    @property
    def every_model_failed(self) -> bool:
        """True when the agent's model endpoint failed in every episode: scored 0 (the agent's),
        but most likely a set-up to fix (a URL, a key, a server down), so the command fails."""
        s = self.summary
        return s.n_episodes > 0 and s.n_model_failed == s.n_episodes


async def evaluate(
    spec: EnvSpec,
    agent: AgentFactory,
    tasks: TaskSet,
    *,
    out_dir: str | Path,
    samples: int = 1,
    concurrency: int = 8,
    seed: int = 0,
    resume: bool = False,
    config: EpisodeConfig | None = None,
    observer: RunObserver | None = None,
    pass_threshold: float = 1.0,
    command: list[str] | None = None,
    must_pass: Iterable[str] | None = None,
    confidence: float = 0.95,
    backend: str = "local",
    ray_address: str | None = None,
) -> Evaluation:
    """Run (or finish) the rollout, then write ``summary.json`` next to the trajectories.

    Gating tasks are those named in ``must_pass`` plus every task whose metadata says
    ``must_pass: true``; the summary reports them apart from the mean (``gate``). ``agent`` is
    the caller's to close (``await agent.aclose()``). ``backend="ray"`` runs the episodes on
    Ray actors (at ``ray_address``, else a local instance; docs/ray.md).
    """
    from envlab.measure.summary import summarize
    from envlab.rollout import rollout, watch
    from envlab.runs import SUMMARY_FILE

    details = EpisodeDetails()
    with watch(details.add):
        result = await rollout(
            spec,
            agent,
            tasks,
            out_dir=out_dir,
            samples=samples,
            concurrency=concurrency,
            seed=seed,
            resume=resume,
            config=config,
            observer=observer,
            command=command,
            backend=backend,
            ray_address=ray_address,
        )
    gating = list(must_pass or []) + [t.id for t in tasks if t.metadata.get("must_pass") is True]
    summary = summarize(
        result.records,
        pass_threshold=pass_threshold,
        confidence=confidence,
        must_pass=gating or None,
        model_failures=config.model_failures if config is not None else "agent",
    )
    (result.run_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2))
    return Evaluation(result, summary, _this_run(details, result))


def _this_run(seen: EpisodeDetails, result: RolloutResult) -> EpisodeDetails:
    """Details of this run's episodes only: the new ones (``watch`` saw them; it may also see
    another run's in this process) and, when resumed, the earlier ones, read from the store."""
    ids = {r.episode_id for r in result.records}
    if result.skipped_episodes:
        from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore

        earlier = EpisodeDetails()
        store = TrajectoryStore(result.run_dir / TRAJECTORIES_FILE)
        for traj in store.iter(messages=False):  # one at a time, no blobs read
            if traj.episode_id in ids and traj.episode_id not in seen.episodes:
                earlier.add(traj)
        seen = EpisodeDetails({**earlier.episodes, **seen.episodes})
    return seen.only(ids)
