"""``envlab vet``: run the probe episodes of every task, then the checks, then the verdicts.

Every episode runs through the one episode driver (``envlab.rollout.run_episodes``) with the
limits the spec declares for its task (``spec.limits(task)``); vet only chooses the probes,
their retries (none: an escape is evidence) and the hooks that record what the checks read
(the state after reset; re-grades and a copy of the oracle's workspace after the grade).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envlab import __version__
from envlab.core import (
    AgentFactory,
    ConfigError,
    Environment,
    EnvSpec,
    Reward,
    Status,
    Task,
    Trajectory,
    validate_reward,
)
from envlab.core.rubric import reward_range_of
from envlab.rollout import EpisodeHooks, PlannedEpisode, episode_ids, run_episodes
from envlab.rollout.driver import backend_session
from envlab.runs import TRAJECTORIES_FILE, VET_FILE, TrajectoryStore, safe_name
from envlab.vet import checks as C
from envlab.vet import exposure as X
from envlab.vet import python_checks as P
from envlab.vet import spam as S
from envlab.vet.folders import folder_context, plan_informed, scan, task_folder
from envlab.vet.hacks import has_python_targets
from envlab.vet.model import CheckResult, EnvCheck, EnvVet, TaskVet
from envlab.vet.plan import Episode, plan_task_folder
from envlab.vet.python_vet import (
    PythonProbes,
    python_results,
    run_python_probes,
    wider_strategies,
)
from envlab.vet.verdict import quality_score, task_verdict, verdict_counts

AGENT_RETRIES = 2
"""Retries of the real agent's episodes after ``infra_error`` (probes get none)."""


@dataclass(slots=True)
class VetConfig:
    oracle_runs: int = 5
    """M: fresh oracle runs, and grades of one frozen workspace."""
    samples: int = 4
    """Episodes of the real agent per task (the trainability check)."""
    group_size: int = 8
    """The trainer's G, for the dead-group probability."""
    concurrency: int = 2
    tasks: int | None = None
    seed: int = 0
    backend: str = "local"
    """Where the episodes run (``rollout.driver.BACKENDS``): this process, or Ray actors."""
    address: str | None = None
    """The Ray cluster of ``backend="ray"`` (``None``: the connection this process has, or a
    local instance for the whole vet)."""


class VetObserver(Protocol):
    """What a caller (the CLI's progress bar) is told as vet runs. Vet runs its episodes in
    batches (a Python environment in one; task folders in two, the second built from the
    first's results): ``planned(n)`` announces each batch, ``finished`` sees each episode."""

    def planned(self, n: int) -> None: ...

    def finished(self, episode: PlannedEpisode, trajectory: Trajectory) -> None: ...


async def vet_environment(
    spec: EnvSpec,
    *,
    out_dir: str | Path,
    agent: AgentFactory | None = None,
    config: VetConfig | None = None,
    observer: VetObserver | None = None,
) -> EnvVet:
    """Vet ``spec``: every check on every task; writes ``vet.json`` and the probe trajectories
    (``trajectories.jsonl``, each with ``info["probe"]``) to ``out_dir``.

    ``agent`` (the trainability check; ``None`` skips it) is the caller's: the caller closes
    it. Task folders run in two phases: first the baselines, the oracle and the probes that
    need nothing else; then the probes built from what the oracle wrote and from the leak
    scan. Raises ``StoreError`` when another vet writes to ``out_dir``."""
    cfg = config or VetConfig()
    t0 = time.perf_counter()
    out = Path(out_dir).resolve()  # the same path on every Ray worker of this host
    out.mkdir(parents=True, exist_ok=True)
    tasks = list(spec.tasks(seed=cfg.seed, n=cfg.tasks))
    kind = _kind(spec, tasks)
    run = _Run(spec, cfg, out, observer)
    probes: PythonProbes | None = None
    evidence = {t.id: C.TaskEvidence(t, kind) for t in tasks}
    listener = await _Listener.start()
    run.network_port = listener.port
    try:
        with run.store, backend_session(cfg.backend, cfg.address, cfg.concurrency):
            if kind == "taskfolder":
                await _vet_folders(run, tasks, evidence, listener.port)
            else:
                probes = await run_python_probes(
                    spec, tasks, evidence, run.episodes, cfg.oracle_runs
                )
            if agent is not None:
                await run.episodes(
                    [
                        Episode(t, "agent", agent, sample=i, max_retries=AGENT_RETRIES)
                        for t in tasks
                        for i in range(cfg.samples)
                    ],
                    evidence,
                )
    finally:
        await listener.close()
    report = _report(run, tasks, evidence, probes, agent, time.perf_counter() - t0)
    (out / VET_FILE).write_text(report.model_dump_json(indent=2))
    return report


def _kind(spec: EnvSpec, tasks: list[Task]) -> str:
    """``taskfolder`` when every task is a task folder (its metadata names one), ``python``
    when none is; an environment that mixes them is vetted one kind at a time."""
    folders = sum(task_folder(t) is not None for t in tasks)
    if folders and folders < len(tasks):
        raise ConfigError(
            f"{spec.name}: {folders} of {len(tasks)} tasks are task folders and the others are "
            "not; vet the task folders and the other tasks as two environments"
        )
    return "taskfolder" if folders else "python"


async def _vet_folders(
    run: _Run, tasks: list[Task], evidence: dict[str, C.TaskEvidence], port: int
) -> None:
    contexts = {t.id: await folder_context(t) for t in tasks}
    first: list[Episode] = []
    for task in tasks:
        ctx = contexts[task.id]
        eps, probes = plan_task_folder(
            task,
            ctx.tests_text,
            probe_dir=run.out / "probes",
            oracle_runs=run.cfg.oracle_runs if ctx.solve else 0,
            network_port=port,
            python_targets=has_python_targets(ctx.tests_text, ctx.has_python),
        )
        first += eps
        evidence[task.id].probes.update(probes)
    await run.episodes(first, evidence)
    second: list[Episode] = []
    for task in tasks:
        scan(contexts[task.id], evidence[task.id])
        eps, probes = plan_informed(contexts[task.id], evidence[task.id], run.out / "probes")
        second += eps
        evidence[task.id].probes.update(probes)
    await run.episodes(second, evidence)


def _report(
    run: _Run,
    tasks: list[Task],
    evidence: dict[str, C.TaskEvidence],
    probes: PythonProbes | None,
    agent: AgentFactory | None,
    elapsed: float,
) -> EnvVet:
    cfg = run.cfg
    kind = "python" if probes is not None else "taskfolder"
    python = (
        P.python_env_findings(tasks, evidence, wider_strategies(evidence))
        if probes is not None
        else None
    )
    more = python_results(tasks, evidence, probes, python.leak) if probes and python else None
    train = P.trainability(tasks, evidence, agent is not None, cfg.group_size)
    task_vets: list[TaskVet] = []
    for task in tasks:
        ev = evidence[task.id]
        results: list[CheckResult] = [
            C.check_noop(ev),
            S.check_spam(ev),
            C.check_oracle(ev),
            C.check_regrade(ev),
            X.check_tamper(ev),
            X.check_leak(ev) if more is None else more.leak[task.id],
            C.check_network(ev),
            C.check_verifier_health(ev),
            C.check_trivial_options(ev) if python is None else python.trivial[task.id],
            train.per_task[task.id],
            C.check_reset_hygiene(ev),
            *(more.per_task[task.id] if more is not None else []),
        ]
        task_vets.append(task_verdict(task.id, results))
    env_checks: list[EnvCheck] = [
        S.baseline_passes(tasks, evidence),
        train.env_check,
        P.adequacy(tasks, evidence, agent is not None, cfg),
    ]
    if python is not None:
        env_checks += python.env_checks
    if more is not None:
        env_checks += more.env_checks
    return EnvVet(
        env_id=run.env_id,
        env_hash=run.env_hash,
        envlab_version=__version__,
        created_at=time.time(),
        agent=agent.spec if agent is not None else None,
        settings={
            "oracle_runs": cfg.oracle_runs,
            "samples": cfg.samples,
            "group_size": cfg.group_size,
            "tasks": len(tasks),
            "seed": cfg.seed,
            "kind": kind,
        },
        verdict_counts=verdict_counts(task_vets),
        quality_score=round(quality_score(task_vets), 2),
        clean=not any(t.verdict == "quarantine" for t in task_vets),
        env_checks=env_checks,
        tasks=task_vets,
        elapsed_s=round(elapsed, 2),
        episodes=run.n_episodes,
        infra_errors=run.n_infra,
    )


class _Run:
    """The episodes of one vet run: one trajectory store, their ids and hooks, a count."""

    def __init__(
        self, spec: EnvSpec, cfg: VetConfig, out: Path, observer: VetObserver | None
    ) -> None:
        self.spec, self.cfg, self.out, self.observer = spec, cfg, out, observer
        self.env_id, self.env_hash = spec.name, spec.content_hash()
        self.store = TrajectoryStore(out / TRAJECTORIES_FILE)
        self.store.lock()  # a second vet on the same --out is refused before anything is lost
        self.store.path.unlink(missing_ok=True)
        self.n_episodes = self.n_infra = 0
        self._groups: dict[str, int] = {}
        self._plain = EpisodeHooks(after_reset=_state)
        self.network_port: int | None = None
        """The port of the network probe's target on the host's loopback (``_Listener``)."""

    def planned(self, ep: Episode) -> PlannedEpisode:
        """``ep`` for the driver: the samples of one probe on one task form a group."""
        run_seed = self.cfg.seed + self._groups.setdefault(ep.probe, len(self._groups))
        if ep.regrade:
            hooks = EpisodeHooks(after_reset=_state, after_grade=self._regrader(ep.task))
        elif ep.probe == "network" and self.network_port is not None:
            hooks = _network_hooks(self.network_port)
        else:
            hooks = self._plain
        return PlannedEpisode(
            task=ep.task,
            sample_index=ep.sample,
            ids=episode_ids(self.env_id, self.env_hash, ep.task.id, run_seed, ep.sample),
            agent=ep.agent,
            max_retries=ep.max_retries,
            hooks=hooks,
            info={"probe": ep.probe},
        )

    async def episodes(self, episodes: list[Episode], evidence: dict[str, C.TaskEvidence]) -> None:
        """Run ``episodes``; each trajectory goes to the store and to its task's evidence."""
        if not episodes:
            return
        if self.observer is not None:
            self.observer.planned(len(episodes))
        trajectories = await run_episodes(
            self.spec,
            [self.planned(ep) for ep in episodes],
            concurrency=self.cfg.concurrency,
            on_trajectory=self._finished,
            backend=self.cfg.backend,
            address=self.cfg.address,
        )
        for ep, t in zip(episodes, trajectories, strict=True):
            evidence[ep.task.id].by_probe.setdefault(ep.probe, []).append(t)
        self.n_episodes += len(trajectories)
        self.n_infra += sum(t.status is Status.INFRA_ERROR for t in trajectories)

    def _finished(self, episode: PlannedEpisode, trajectory: Trajectory) -> None:
        self.store.append(trajectory)
        if self.observer is not None:
            self.observer.finished(episode, trajectory)

    def _regrader(self, task: Task) -> Callable[[Environment, Reward | None], Awaitable[dict]]:
        """The after-grade hook of the first oracle run: a copy of the final workspace (what
        the second phase reads), then ``oracle_runs`` grades of that same final state."""
        dest = self.out / "snapshots" / safe_name(task.id)
        runs = max(self.cfg.oracle_runs, 1)

        meta = task.metadata

        async def regrade(env: Environment, reward: Reward | None) -> dict[str, Any]:
            info: dict[str, Any] = {}
            await asyncio.to_thread(shutil.rmtree, dest, True)
            try:  # a copy that fails costs the second phase its evidence, not the re-grades
                if await env.export_workspace(dest) is not None:
                    info["workspace_snapshot"] = str(dest)
                    info["host"] = socket.gethostname()  # a Ray worker's may be another
            except Exception as ex:
                info["snapshot_error"] = f"{type(ex).__name__}: {ex}"[:500]
            again: list[float | None] = []
            errors: list[str] = []
            for _ in range(runs):
                try:  # judged as the engine judges the first grade: valid, and normalised
                    r = await env.regrade()
                    valid = None if r is None else validate_reward(r, reward_range_of(meta))
                    again.append(valid.total if valid is not None else None)
                except Exception as ex:  # a failed re-grade is evidence, not a crash of vet
                    again.append(None)
                    errors.append(f"{type(ex).__name__}: {ex}"[:500])
            return {**info, "regrades": again, "regrade_errors": errors}

        return regrade


async def _state(env: Environment) -> dict[str, Any]:
    return env.state()


def _network_hooks(port: int) -> EpisodeHooks:
    """The network probe's hooks: on a host where nothing listens on ``port`` (a Ray worker's
    other than the driver's, whose ``_Listener`` has it) a socket listens there from reset to
    grade, so a sandbox that reaches its host's loopback connects on every host alike (the
    kernel completes the handshake; nothing needs to accept)."""
    held: list[socket.socket] = []

    async def listen(env: Environment) -> dict[str, Any]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(16)
            held.append(sock)
        except OSError:  # in use: this host's listener is the driver's
            sock.close()
        return env.state()

    async def release(env: Environment, reward: Reward | None) -> dict[str, Any]:
        while held:
            held.pop().close()
        return {}

    return EpisodeHooks(after_reset=listen, after_grade=release)


class _Listener:
    """A TCP server on the host's loopback: the target of the network probe."""

    def __init__(self, server: asyncio.Server, port: int) -> None:
        self.server, self.port, self.connections = server, port, 0

    @classmethod
    async def start(cls) -> _Listener:
        holder: list[_Listener] = []

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            holder[0].connections += 1
            writer.close()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        listener = cls(server, port)
        holder.append(listener)
        return listener

    async def close(self) -> None:
        self.server.close()
        await self.server.wait_closed()
