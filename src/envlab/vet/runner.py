"""``envlab vet``: run the probe episodes of every task, then the checks, then the verdicts."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envlab import __version__
from envlab.core import Agent, Environment, Reward, Status, Task, Trajectory
from envlab.rollout import EpisodeConfig, EpisodeHooks, TrajectoryStore, run_episode
from envlab.vet import checks as C
from envlab.vet import python_checks as P
from envlab.vet.leak import (
    declared_inputs,
    drop_spec,
    expected_values,
    oracle_outputs,
    scan_env,
    scan_instruction,
    scan_workspace,
)
from envlab.vet.model import CheckResult, EnvCheck, EnvVet, TaskVet
from envlab.vet.plan import (
    Episode,
    constant_answers,
    plan_python_env,
    plan_task_folder,
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
    """Vet ``env``: every check on every task; writes ``vet.json`` and the probe trajectories."""
    from envlab.envs.taskfolder import TerminalEnv

    cfg = config or VetConfig()
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = list(env.tasks(seed=cfg.seed, n=cfg.tasks))
    env_hash = env.content_hash()
    kind = "taskfolder" if isinstance(env, TerminalEnv) else "python"
    listener = await _Listener.start()
    try:
        episodes, probe_names = _plan(env, tasks, kind, cfg, out, listener.port)
        if agent is not None:
            episodes += [
                Episode(t, "agent", agent, sample=i) for t in tasks for i in range(cfg.samples)
            ]
        trajs = await _run_all(env, env_id, env_hash, episodes, cfg, out)
    finally:
        await listener.close()
    by_task: dict[str, dict[str, list[Trajectory]]] = defaultdict(lambda: defaultdict(list))
    for ep, t in trajs:
        by_task[ep.task.id][ep.probe].append(t)

    evidence = {t.id: C.TaskEvidence(t, kind, by_probe=dict(by_task[t.id])) for t in tasks}
    if kind == "taskfolder":
        await _scan_task_folders(tasks, evidence, out)
    python = P.python_env_findings(tasks, evidence) if kind == "python" else None
    train = P.trainability(tasks, evidence, agent is not None, cfg.group_size)

    task_vets: list[TaskVet] = []
    for task in tasks:
        ev = evidence[task.id]
        results: list[CheckResult] = [
            C.check_noop(ev),
            C.check_oracle(ev),
            C.check_regrade(ev),
            C.check_tamper(ev, probe_names.get(task.id, {}).get("tamper", [])),
            C.check_leak(ev) if python is None else python.leak[task.id],
            C.check_network(ev),
            C.check_verifier_health(ev),
            C.check_trivial_options(ev, probe_names.get(task.id, {}).get("trivial", []))
            if python is None
            else python.trivial[task.id],
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
    n_eps = len(trajs)
    report = EnvVet(
        env_id=env_id,
        env_hash=env_hash,
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
        elapsed_s=round(time.perf_counter() - t0, 2),
        episodes=n_eps,
        infra_errors=sum(t.status is Status.INFRA_ERROR for _, t in trajs),
    )
    (out / VET_FILE).write_text(report.model_dump_json(indent=2))
    return report


def _plan(
    env: Environment, tasks: list[Task], kind: str, cfg: VetConfig, out: Path, port: int
) -> tuple[list[Episode], dict[str, dict[str, list[str]]]]:
    episodes: list[Episode] = []
    names: dict[str, dict[str, list[str]]] = {}
    if kind == "taskfolder":
        from envlab.envs.taskfolder import load_task_folder

        for task in tasks:
            folder = load_task_folder(task.metadata["path"])
            tests_text = _tests_text(folder.tests_dir)
            eps, probes = plan_task_folder(
                task,
                tests_text,
                probe_dir=out / "probes",
                oracle_runs=cfg.oracle_runs if folder.solution else 0,
                network_port=port,
            )
            episodes += eps
            names[task.id] = {
                "tamper": [
                    p
                    for p in probes
                    if p not in ("empty_answer", "network", "echo_prompt")
                    and not p.startswith("constant_")
                ],
                "trivial": [p for p in probes if p.startswith("constant_") or p == "echo_prompt"],
            }
    else:
        constants = constant_answers(tasks)
        for task in tasks:
            episodes += plan_python_env(task, constants, oracle_runs=cfg.oracle_runs)
    return episodes, names


def _tests_text(tests_dir: Path) -> str:
    parts = []
    for p in sorted(tests_dir.rglob("*")) if tests_dir.is_dir() else []:
        if p.is_file() and p.stat().st_size < 1 << 20:
            parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


async def _run_all(
    env: Environment,
    env_id: str,
    env_hash: str,
    episodes: list[Episode],
    cfg: VetConfig,
    out: Path,
) -> list[tuple[Episode, Trajectory]]:
    store = TrajectoryStore(out / "trajectories.jsonl")
    store.path.unlink(missing_ok=True)
    results: list[tuple[Episode, Trajectory]] = []
    work = iter(enumerate(episodes))
    progress = Progress(
        TextColumn("[bold]vet"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not cfg.progress,
    )
    bar = progress.add_task("vet", total=len(episodes), last="")

    async def regrade_hook(e: Environment, reward: Reward | None) -> dict[str, Any]:
        again: list[float | None] = []
        errors: list[str] = []
        info: dict[str, Any] = {}
        export = getattr(e, "export_workspace", None)
        task_id = getattr(getattr(e, "task", None), "id", None)
        if export is not None and task_id is not None:
            dest = (
                out
                / "snapshots"
                / "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)
            )
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
                env,
                ep.agent,
                ep.task,
                ep.sample,
                env_id=env_id,
                env_hash=env_hash,
                agent_spec=ep.agent.spec,
                run_seed=cfg.seed + i,
                config=ec,
                hooks=hooks,
            )
            traj.info["probe"] = ep.probe
            store.append(traj)
            results.append((ep, traj))
            progress.update(bar, advance=1, last=f"{ep.task.id[:30]} {ep.probe}")

    with store, progress:
        await asyncio.gather(*(worker() for _ in range(max(1, cfg.concurrency))))
    order = {id(ep): i for i, ep in enumerate(episodes)}
    results.sort(key=lambda r: order[id(r[0])])
    return results


async def _scan_task_folders(
    tasks: list[Task], evidence: dict[str, C.TaskEvidence], out: Path
) -> None:
    """Needles from the tests and the oracle's output; surfaces from the prepared workspace."""
    from envlab.envs.taskfolder import load_task_folder, prepare_workspace

    for task in tasks:
        ev = evidence[task.id]
        folder = load_task_folder(task.metadata["path"])
        ev.tests_text = _tests_text(folder.tests_dir)
        ev.network_declared = str(task.metadata.get("network_mode", "none")) != "none"
        try:
            prepared = await prepare_workspace(folder)
            solve = folder.solution.read_text(errors="replace") if folder.solution else ""
            needles = expected_values(folder.tests_dir)
            after = _oracle_workspace(ev, out)
            if after is not None:
                needles += oracle_outputs(prepared.app_dir, after)
            needles = drop_spec(needles, solve)
            ev.leak_needles = len(needles)
            inputs = declared_inputs(prepared.app_dir, task.prompt, solve)
            input_texts = [
                (prepared.app_dir / rel).read_text(errors="replace")
                for rel in sorted(inputs)
                if (prepared.app_dir / rel).stat().st_size < 4 << 20
            ]
            env_vars = {**prepared.env, **folder.config.environment.env}
            ev.leak_hits = (
                scan_instruction(needles, task.prompt, input_texts)
                + scan_env(needles, env_vars)
                + scan_workspace(prepared.app_dir, needles, inputs)
            )
        except Exception as e:  # a task that cannot be built is reported, not fatal to vet
            ev.leak_error = f"{type(e).__name__}: {e}"[:500]


def _oracle_workspace(ev: C.TaskEvidence, out: Path) -> Path | None:
    for t in ev.by_probe.get("oracle", []):
        snap = t.info.get("after_grade", {}).get("workspace_snapshot")
        if snap and Path(snap).is_dir():
            return Path(snap)
    return None


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
