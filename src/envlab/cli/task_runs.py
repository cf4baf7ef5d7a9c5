"""The episodes of ``envlab task run|check``, through the one driver, and their rows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from envlab.cli.options import open_agent, open_env

if TYPE_CHECKING:
    from envlab.cli.progress import RunProgress
    from envlab.core import AgentFactory, EnvSpec, Limits, Task, Trajectory
    from envlab.envs.taskfolder import TaskFolder


class EpisodeRow(BaseModel):
    task_id: str
    sample: int
    agent: str
    status: str
    reward: float | None
    components: dict[str, float] = Field(default_factory=dict)
    duration_s: float
    attempts: int
    error: dict[str, str] | None = None
    """``{kind, phase, message}`` when the episode did not end ``ok``."""
    grader_failed: str | None = None
    """Why the grade was invalid twice (the episode then scores 0)."""
    verifier_exit_code: int | None = None
    verifier_mode: str | None = None
    """Harbor's verifier mode that graded it (``separate``/``shared``); None: no grade ran."""
    verifier_output_tail: str = ""
    agent_output_tail: str = ""
    """The end of the last tool result the agent saw (the oracle: what solve.sh printed)."""

    @classmethod
    def of(cls, traj: Trajectory) -> EpisodeRow:
        grade = traj.info.get("grade") or {}
        e = traj.error
        return cls(
            task_id=traj.task_id,
            sample=traj.sample_index,
            agent=traj.agent.name,
            status=str(traj.status),
            reward=traj.reward,
            components=traj.components,
            duration_s=round(traj.timings.duration_s, 3),
            attempts=traj.attempts,
            error=None if e is None else {"kind": e.kind, "phase": e.phase, "message": e.message},
            grader_failed=traj.grader_failed,
            verifier_exit_code=grade.get("verifier_exit_code"),
            verifier_mode=grade.get("verifier_mode"),
            verifier_output_tail=str(grade.get("verifier_output_tail", "")),
            agent_output_tail=_last_tool_output(traj),
        )

    def why(self) -> str:
        """One line on why this sample scored what it did."""
        if self.grader_failed:
            from envlab.core.text import headline

            return "grader failed: " + headline(self.grader_failed)
        if self.error:
            from envlab.core import EpisodeError

            return EpisodeError(**self.error).describe()  # type: ignore[arg-type]
        tail = self.verifier_output_tail.strip().splitlines()
        code = self.verifier_exit_code
        return f"test.sh exit {code}" + (f": {tail[-1][:160]}" if tail else "")


def _last_tool_output(traj: Trajectory) -> str:
    for m in reversed(traj.messages):
        if m.get("role") == "tool" and m.get("content") != "submitted":
            return str(m.get("content", ""))[-2000:]
    return ""


class CheckRow(BaseModel):
    task_id: str
    ok: bool
    oracle: list[EpisodeRow]
    noop: list[EpisodeRow]
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


async def run_samples(
    spec: EnvSpec,
    runs: list[tuple[AgentFactory, int]],
    tasks: list[Task],
    *,
    concurrency: int = 4,
    max_retries: int = 1,
    overrides: Limits | None = None,
    progress: RunProgress | None = None,
    model_failures: str = "agent",
    backend: str = "local",
    address: str | None = None,
) -> list[list[EpisodeRow]]:
    """For each ``(agent, samples)`` of ``runs``: that many samples of every task, all in one
    plan through the driver (on ``backend``). One list of rows per entry of ``runs``, in plan
    order."""
    from envlab.core import Limits
    from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes

    seed_hash = spec.seed_hash()
    plan: list[PlannedEpisode] = []
    for run_seed, (agent, samples) in enumerate(runs):
        for task in tasks:
            for s in range(samples):
                ids = episode_ids(spec.name, seed_hash, task.id, run_seed, s)
                plan.append(PlannedEpisode(task, s, ids, agent))
    config = EpisodeConfig(
        overrides=overrides or Limits.overrides(),
        max_retries=max_retries,
        model_failures=model_failures,  # type: ignore[arg-type]
    )
    if progress is not None:
        progress.started(len(plan), [])
    trajs = await run_episodes(
        spec,
        plan,
        config=config,
        concurrency=concurrency,
        on_trajectory=None if progress is None else progress.trajectory,
        backend=backend,
        address=address,
    )
    rows = [EpisodeRow.of(t) for t in trajs]
    out_rows, start = [], 0
    for _, samples in runs:
        out_rows.append(rows[start : start + samples * len(tasks)])
        start += samples * len(tasks)
    return out_rows


async def check(
    path: Path,
    runs: int,
    noop_runs: int,
    concurrency: int,
    max_retries: int = 0,
    *,
    sandbox: str | None = None,
    progress: RunProgress | None = None,
    backend: str = "local",
    address: str | None = None,
) -> list[CheckRow]:
    """The oracle ``runs`` times and the no-op agent ``noop_runs`` times on every task folder
    under ``path`` (its episodes on ``backend``); a row per task says whether it keeps the
    contract."""
    from envlab.envs.taskfolder import find_task_folders

    spec = open_env(str(path), {}, sandbox)
    tasks = list(spec.tasks())
    oracle, noop = open_agent("oracle", {}), open_agent("noop", {})
    try:
        oracle_rows, noop_rows = await run_samples(
            spec, [(oracle, runs), (noop, noop_runs)], tasks,
            concurrency=concurrency, max_retries=max_retries, progress=progress,
            backend=backend, address=address,
        )  # fmt: skip
    finally:
        await oracle.aclose()
        await noop.aclose()
    images = getattr(spec.config, "images", "off")
    rows = [
        await _check_row(folder, oracle_rows, noop_rows, images)
        for folder in find_task_folders(path)
    ]
    await _suggest_shared(path, rows, sandbox, concurrency, backend, address)
    return rows


async def _suggest_shared(
    path: Path,
    rows: list[CheckRow],
    sandbox: str | None,
    concurrency: int,
    backend: str,
    address: str | None,
) -> None:
    """Where the oracle failed graded ``separate``, run it once graded ``shared``: if it then
    passes, the task's tests need the agent's system state, and the row says to declare so."""
    failed = [r for r in rows if any(o.verifier_mode == "separate" and o.reward != 1.0
                                     for o in r.oracle)]  # fmt: skip
    if not failed:
        return
    spec = open_env(str(path), {"verifier_mode": "shared"}, sandbox)
    tasks = [t for t in spec.tasks() if t.id in {r.task_id for r in failed}]
    oracle = open_agent("oracle", {})
    try:
        (shared,) = await run_samples(
            spec, [(oracle, 1)], tasks, concurrency=concurrency, backend=backend, address=address
        )
    finally:
        await oracle.aclose()
    passed = {r.task_id for r in shared if r.status == "ok" and r.reward == 1.0}
    for row in failed:
        if row.task_id in passed:
            row.problems.append(
                "the oracle fails graded separate but passes graded shared: its tests need the "
                'agent\'s system state; declare [verifier] environment_mode = "shared" in '
                "task.toml"
            )


async def _build_notes(folder: TaskFolder, images: str) -> list[str]:
    """Which mode the task ran in, and where its build differs from Docker's (what the runtime
    prepared: from the build cache)."""
    from envlab.sandbox.tasks.runtime import prepare_runtime

    return (await prepare_runtime(folder, images=images)).notes


async def _check_row(
    folder: TaskFolder, oracle: list[EpisodeRow], noop: list[EpisodeRow], images: str = "off"
) -> CheckRow:
    from envlab.core.errors import EnvlabError

    o = [r for r in oracle if r.task_id == folder.name]
    n = [r for r in noop if r.task_id == folder.name]
    problems = [] if folder.solution is not None else ["no solution/solve.sh"]
    for who, rows, want in (("oracle", o, 1.0), ("noop", n, 0.0)):
        seen: dict[str, list[int]] = {}  # the same failure in every run is said once
        for r in rows:
            if r.status != "ok" or r.reward != want:
                seen.setdefault(f"{r.status}, reward {r.reward} ({r.why()})", []).append(r.sample)
        for what, samples in seen.items():
            which = "sample" if len(samples) == 1 else "samples"
            problems.append(f"{who} {which} {', '.join(map(str, samples))}: {what}")
    notes = [f"task.toml: unknown key {k}" for k in folder.config.unknown_keys()]
    modes = sorted({r.verifier_mode for r in o + n if r.verifier_mode})
    notes += [f"verifier mode: {', '.join(modes)}"] if modes else []
    try:
        notes += await _build_notes(folder, images)
    except EnvlabError as e:
        notes.append(f"build: {e}")
    return CheckRow(
        task_id=folder.name, ok=not problems, oracle=o, noop=n, problems=problems, notes=notes
    )
