"""``envlab vet``: run the probe episodes of every task, then the checks, then the verdicts."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envlab import __version__
from envlab.core import Agent, Environment, Reward, Status, Task, Trajectory
from envlab.rollout import EpisodeConfig, EpisodeHooks, TrajectoryStore, run_episode
from envlab.vet import checks as C
from envlab.vet import exposure as X
from envlab.vet import python_checks as P
from envlab.vet.folders import folder_context, plan_informed, scan
from envlab.vet.hacks import has_python_targets
from envlab.vet.model import CheckResult, EnvCheck, EnvVet, TaskVet
from envlab.vet.plan import (
    Episode,
    constant_answers,
    plan_python_env,
    plan_task_folder,
    safe_name,
)
from envlab.vet.verdict import quality_score, task_verdict, verdict_counts

VET_FILE = "vet.json"


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
    progress: bool = True


async def vet_environment(
    env: Environment,
    *,
    env_id: str,
    out_dir: str | Path,
    agent: Agent | None = None,
    config: VetConfig | None = None,
) -> EnvVet:
    """Vet ``env``: every check on every task; writes ``vet.json`` and the probe trajectories.

    Task folders run in two phases: first the baselines, the oracle and the probes that need
    nothing else; then the probes built from what the oracle wrote and from the leak scan."""
    from envlab.envs.taskfolder import TerminalEnv

    cfg = config or VetConfig()
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = list(env.tasks(seed=cfg.seed, n=cfg.tasks))
    kind = "taskfolder" if isinstance(env, TerminalEnv) else "python"
    run = _Run(env, env_id, env.content_hash(), cfg, out)
    evidence = {t.id: C.TaskEvidence(t, kind) for t in tasks}
    listener = await _Listener.start()
    try:
        with run.store:
            if kind == "taskfolder":
                await _vet_folders(run, tasks, evidence, listener.port)
            else:
                constants = constant_answers(tasks)
                await run.episodes(
                    [
                        e
                        for t in tasks
                        for e in plan_python_env(t, constants, oracle_runs=cfg.oracle_runs)
                    ],
                    evidence,
                )
            if agent is not None:
                await run.episodes(
                    [
                        Episode(t, "agent", agent, sample=i)
                        for t in tasks
                        for i in range(cfg.samples)
                    ],
                    evidence,
                )
    finally:
        await listener.close()
    report = _report(run, tasks, evidence, kind, agent, time.perf_counter() - t0)
    (out / VET_FILE).write_text(report.model_dump_json(indent=2))
    return report


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
    kind: str,
    agent: Agent | None,
    elapsed: float,
) -> EnvVet:
    cfg = run.cfg
    python = P.python_env_findings(tasks, evidence) if kind == "python" else None
    train = P.trainability(tasks, evidence, agent is not None, cfg.group_size)
    task_vets: list[TaskVet] = []
    for task in tasks:
        ev = evidence[task.id]
        results: list[CheckResult] = [
            C.check_noop(ev),
            C.check_oracle(ev),
            C.check_regrade(ev),
            X.check_tamper(ev),
            X.check_leak(ev) if python is None else python.leak[task.id],
            C.check_network(ev),
            C.check_verifier_health(ev),
            C.check_trivial_options(ev) if python is None else python.trivial[task.id],
            train.per_task[task.id],
            C.check_reset_hygiene(ev),
        ]
        task_vets.append(task_verdict(task.id, results))
    env_checks: list[EnvCheck] = [
        train.env_check,
        P.adequacy(tasks, evidence, agent is not None, cfg),
    ]
    if python is not None:
        env_checks += python.env_checks
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
    """The episodes of one vet run: one trajectory store, one progress bar, a running count."""

    def __init__(
        self, env: Environment, env_id: str, env_hash: str, cfg: VetConfig, out: Path
    ) -> None:
        self.env, self.env_id, self.env_hash, self.cfg, self.out = env, env_id, env_hash, cfg, out
        self.store = TrajectoryStore(out / "trajectories.jsonl")
        self.store.lock()  # a second vet on the same --out is refused before anything is lost
        self.store.path.unlink(missing_ok=True)
        self.n_episodes = self.n_infra = 0
        self._seed = cfg.seed

    async def episodes(self, episodes: list[Episode], evidence: dict[str, C.TaskEvidence]) -> None:
        """Run ``episodes``; each trajectory goes to the store and to its task's evidence."""
        results = await _run_all(self, episodes)
        for ep, t in results:
            evidence[ep.task.id].by_probe.setdefault(ep.probe, []).append(t)
        self.n_episodes += len(results)
        self.n_infra += sum(t.status is Status.INFRA_ERROR for _, t in results)


async def _run_all(run: _Run, episodes: list[Episode]) -> list[tuple[Episode, Trajectory]]:
    cfg, out = run.cfg, run.out
    results: list[tuple[Episode, Trajectory]] = []
    base_seed = run._seed
    run._seed += len(episodes)
    work = iter(enumerate(episodes))
    progress = Progress(
        TextColumn("[bold]vet"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not cfg.progress or not episodes,
    )
    bar = progress.add_task("vet", total=len(episodes), last="")

    async def regrade_hook(e: Environment, reward: Reward | None) -> dict[str, Any]:
        again: list[float | None] = []
        errors: list[str] = []
        info: dict[str, Any] = {}
        export = getattr(e, "export_workspace", None)
        task_id = getattr(getattr(e, "task", None), "id", None)
        if export is not None and task_id is not None:
            dest = out / "snapshots" / safe_name(task_id)
            shutil.rmtree(dest, ignore_errors=True)
            await export(dest)
            info["workspace_snapshot"] = str(dest)
        for _ in range(max(cfg.oracle_runs, 1)):
            try:
                r = await e.regrade()
                again.append(r.total if r is not None else None)
            except Exception as ex:  # a failed re-grade is evidence, not a crash of vet
                again.append(None)
                errors.append(f"{type(ex).__name__}: {ex}"[:500])
        return {**info, "regrades": again, "regrade_errors": errors}

    async def state_hook(e: Environment) -> dict[str, Any]:
        return e.state()

    async def worker() -> None:
        for i, ep in work:
            timeout = float(ep.task.metadata.get("agent_timeout_sec", 120.0))
            grade_timeout = float(ep.task.metadata.get("verifier_timeout_sec", 120.0))
            ec = EpisodeConfig(
                step_timeout=timeout + 30,
                episode_timeout=timeout * 3 + 60,
                grade_timeout=grade_timeout + 30,
                max_retries=2 if ep.probe == "agent" else 0,
            )
            hooks = EpisodeHooks(
                after_reset=state_hook, after_grade=regrade_hook if ep.regrade else None
            )
            traj = await run_episode(
                run.env,
                ep.agent,
                ep.task,
                ep.sample,
                env_id=run.env_id,
                env_hash=run.env_hash,
                agent_spec=ep.agent.spec,
                run_seed=base_seed + i,
                config=ec,
                hooks=hooks,
            )
            traj.info["probe"] = ep.probe
            run.store.append(traj)
            results.append((ep, traj))
            progress.update(bar, advance=1, last=f"{ep.task.id[:30]} {ep.probe}")

    with progress:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.concurrency))))
    order = {id(ep): i for i, ep in enumerate(episodes)}
    results.sort(key=lambda r: order[id(r[0])])
    return results


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
