"""The Ray backend on a real local Ray instance (num_cpus=2), one for the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlab.agents import load_agent
from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    AgentClass,
    AgentFactory,
    ConfigError,
    EpisodeContext,
    EpisodeRecord,
    Observation,
    Trajectory,
)
from envlab.envs import load_env
from envlab.envs.arith import ArithEnv
from envlab.rollout import rollout
from envlab.runs import TrajectoryStore
from tests.conftest import subprocess_env

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def ray_instance() -> Iterator[None]:
    from ray import cloudpickle

    # this module's agents travel by value: the workers need not import the tests package
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


class KillsItsWorker(OracleAgent):
    """The oracle, except that in task ``victim`` it kills the process it runs in (its Ray
    worker) with SIGKILL: the first ``times`` tries only (counted in files under ``marks``)."""

    def __init__(self, marks: str, victim: str, times: int = 1) -> None:
        super().__init__()
        self.marks, self.victim, self.times = Path(marks), victim, times
        self._kill = False

    async def start(self, ctx: EpisodeContext) -> None:
        await super().start(ctx)
        self._kill = ctx.task_id == self.victim

    async def act(self, observation: Observation) -> Action:
        if self._kill:
            for i in range(self.times):
                try:
                    (self.marks / f"kill-{i}").open("x").close()
                except FileExistsError:
                    continue
                os.kill(os.getpid(), signal.SIGKILL)
        return await super().act(observation)


class Holds(OracleAgent):
    def __init__(self, thing: object = None) -> None:
        super().__init__()
        self.thing = thing


def outcomes(run_dir: Path) -> dict[str, tuple[Any, ...]]:
    trajs = TrajectoryStore(run_dir / "trajectories.jsonl").load()
    ids = [t.episode_id for t in trajs]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    return {t.episode_id: _outcome(t) for t in trajs}


def _outcome(t: Trajectory) -> tuple[Any, ...]:
    return (t.task_id, t.seed, t.status.value, t.reward, t.components, t.n_steps, t.env_hash)


@pytest.mark.parametrize(("env_name", "agent_name", "concurrency"), [
    ("arith", "oracle", 2), ("arith", "random", 1), ("calc", "oracle", 1), ("calc", "random", 2),
])  # fmt: skip
async def test_same_rewards_as_local(
    tmp_path: Path, env_name: str, agent_name: str, concurrency: int
) -> None:
    spec, agent = load_env(env_name), load_agent(agent_name)
    tasks = spec.tasks(n=3)
    run = dict(samples=2, concurrency=concurrency, seed=7)
    await rollout(spec, agent, tasks, out_dir=tmp_path / "local", **run)  # type: ignore[arg-type]
    r = await rollout(spec, agent, tasks, out_dir=tmp_path / "ray", backend="ray", **run)  # type: ignore[arg-type]
    local, remote = outcomes(tmp_path / "local"), outcomes(tmp_path / "ray")
    assert len(local) == 6 and remote == local
    assert r.new_episodes == 6 and len(r.records) == 6
    if agent_name == "oracle":
        assert {o[3] for o in remote.values()} == {1.0}
    info = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert info["env_hash"] == spec.content_hash()


async def test_a_killed_worker_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    spec = load_env("arith")
    tasks = spec.tasks(n=4)
    victim = tasks[1].id
    agent = AgentClass(KillsItsWorker, str(tmp_path), victim)
    r = await rollout(spec, agent, tasks, out_dir=tmp_path / "run", concurrency=2, backend="ray")
    trajs = TrajectoryStore(tmp_path / "run" / "trajectories.jsonl").load()
    assert sorted(t.task_id for t in trajs) == sorted(t.id for t in tasks)  # each exactly once
    assert {t.status.value for t in trajs} == {"ok"} and {t.reward for t in trajs} == {1.0}
    by_task = {t.task_id: t for t in trajs}
    assert by_task[victim].attempts == 2  # the lost try counts, as an infra_error attempt
    assert "ActorDiedError" in by_task[victim].info["ray_workers_lost"][0]
    assert all(t.attempts == 1 for t in trajs if t.task_id != victim)
    assert (tmp_path / "kill-0").exists() and r.new_episodes == 4


async def test_an_agent_that_kills_its_worker_on_every_try_is_scored_0(tmp_path: Path) -> None:
    """The attack: an agent about to fail kills the process it runs in, hoping the lost worker
    is taken for the cluster's failure and the episode left out. The node is alive, so the
    deaths follow the episode: it is recorded once, as the agent's failure, scored 0."""
    spec = load_env("arith")
    tasks = spec.tasks(n=2)
    victim = tasks[0].id
    agent = AgentClass(KillsItsWorker, str(tmp_path), victim, 5)
    from envlab.rollout import EpisodeConfig

    await rollout(
        spec, agent, tasks, out_dir=tmp_path / "run", concurrency=1, backend="ray",
        config=EpisodeConfig(max_retries=0, max_worker_losses=1),
    )  # fmt: skip
    trajs = {t.task_id: t for t in TrajectoryStore(tmp_path / "run" / "trajectories.jsonl").load()}
    assert len(trajs) == 2
    lost = trajs[victim]
    assert lost.status.value == "agent_error" and lost.reward == 0.0 and lost.scored
    assert lost.attempts == 2 and len(lost.info["ray_workers_lost"]) == 2
    assert lost.error is not None and "died on each of its 2 tries" in lost.error.message
    assert trajs[tasks[1].id].status.value == "ok"  # the run went on


def test_a_lost_node_is_the_machinerys() -> None:
    from ray import exceptions as exc

    from envlab.rollout.ray_backend import _cluster_loss

    assert _cluster_loss(exc.NodeDiedError("node 1 died"), exc)
    assert _cluster_loss(exc.OwnerDiedError("00" * 28, "", ""), exc)
    assert not _cluster_loss(exc.ActorDiedError(), exc)  # the worker process, node unknown
    assert not _cluster_loss(exc.WorkerCrashedError(), exc)


class Interrupted(Exception):
    pass


class StopsAfter:
    """A run observer that stops the run (as Ctrl-C would) after ``n`` recorded episodes."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def started(self, total: int, existing: list[EpisodeRecord]) -> None:
        pass

    def finished(self, record: EpisodeRecord) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise Interrupted


async def test_resume_after_an_interrupted_ray_run(tmp_path: Path) -> None:
    spec, agent = load_env("calc"), load_agent("random")
    tasks = spec.tasks(n=4)
    out = tmp_path / "ray"
    with pytest.raises(Interrupted):
        await rollout(
            spec, agent, tasks, out_dir=out, samples=2, concurrency=2, backend="ray",
            observer=StopsAfter(3),
        )  # fmt: skip
    assert len(outcomes(out)) == 3
    await _until(lambda: _processes("ray::EpisodeWorker") == 0)  # its actors were ended
    r = await rollout(
        spec, agent, tasks, out_dir=out, samples=2, concurrency=2, backend="ray", resume=True
    )
    assert r.skipped_episodes == 3 and r.new_episodes == 5 and len(r.records) == 8
    await rollout(spec, agent, tasks, out_dir=tmp_path / "local", samples=2, concurrency=2)
    assert outcomes(out) == outcomes(tmp_path / "local")


async def test_what_does_not_pickle_is_named(tmp_path: Path) -> None:
    spec = load_env("arith")
    tasks = spec.tasks(n=1)
    agent: AgentFactory = AgentClass(Holds, threading.Lock())
    with pytest.raises(ConfigError, match=r"agent 'oracle' .* cannot be sent to Ray workers"):
        await rollout(spec, agent, tasks, out_dir=tmp_path / "a", backend="ray")
    spec.__dict__["lock"] = threading.Lock()
    with pytest.raises(ConfigError, match=r"environment 'arith' .* does not pickle"):
        await rollout(spec, load_agent("oracle"), tasks, out_dir=tmp_path / "b", backend="ray")


async def test_backend_and_address_are_checked(tmp_path: Path) -> None:
    spec = load_env("arith")
    tasks, agent = spec.tasks(n=1), load_agent("oracle")
    with pytest.raises(ConfigError, match="--backend must be one of local, ray"):
        await rollout(spec, agent, tasks, out_dir=tmp_path / "a", backend="dask")
    with pytest.raises(ConfigError, match=r"--address .* needs --backend ray"):
        await rollout(spec, agent, tasks, out_dir=tmp_path / "b", ray_address="auto")


def test_eval_cli_backend_ray(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envlab.cli.main import app

    out = tmp_path / "run"
    args = ["eval", "arith", "-a", "oracle", "-n", "3", "-c", "2", "-o", str(out), "--json"]
    res = CliRunner().invoke(app, [*args, "--backend", "ray"])
    assert res.exit_code == 0, res.output
    assert len(outcomes(out)) == 3
    assert json.loads(res.stdout)["n_scored"] == 3
    bad = subprocess.run(
        [sys.executable, "-m", "envlab.cli.main", *args, "--address", "auto"],
        capture_output=True, text=True, env=subprocess_env(), timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "--address names a Ray cluster; it needs --backend ray" in (
        bad.stderr
    )


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
DRIVER_PID = os.getpid()


class OtherCodeOnWorkers(ArithEnv):
    """Arith whose code hashes differently outside the driver: a node with other code."""

    def _compute_hash(self) -> str:
        return super()._compute_hash() + ("" if os.getpid() == DRIVER_PID else "-other")


class MissingOnWorkers(ArithEnv):
    """Arith whose definition cannot be read outside the driver: a node lacking files."""

    def _compute_hash(self) -> str:
        if os.getpid() != DRIVER_PID:
            raise FileNotFoundError("/srv/tasks/task.toml")
        return super()._compute_hash()


async def test_task_folders_in_sandboxes_on_ray(tmp_path: Path) -> None:
    spec, agent = load_env(str(EXAMPLES / "hello-file"), sandbox="bwrap"), load_agent("oracle")
    tasks = spec.tasks()
    await rollout(spec, agent, tasks, out_dir=tmp_path / "local", samples=2, concurrency=2)
    r = await rollout(
        spec, agent, tasks, out_dir=tmp_path / "ray", samples=2, concurrency=2, backend="ray"
    )
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "local")
    assert [rec.reward for rec in r.records] == [1.0, 1.0]


async def test_workers_with_other_code_stop_the_run(tmp_path: Path) -> None:
    tasks, agent = ArithEnv().tasks(n=2), load_agent("oracle")
    one_actor: dict[str, Any] = {"backend": "ray", "concurrency": 1}
    with pytest.raises(ConfigError, match=r"computes content hash .* the driver .* other code"):
        await rollout(OtherCodeOnWorkers(), agent, tasks, out_dir=tmp_path / "a", **one_actor)
    with pytest.raises(ConfigError, match=r"cannot load the environment: FileNotFoundError"):
        await rollout(MissingOnWorkers(), agent, tasks, out_dir=tmp_path / "b", **one_actor)
    assert not (tmp_path / "a" / "trajectories.jsonl").read_text()  # nothing scored by them


def _processes(*names: str) -> int:
    """How many processes on this machine have a first argument ending in one of ``names``
    (Ray's daemons are ``.../raylet``; an actor's worker retitles itself ``ray::Class``)."""
    n = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv0 = cmdline.read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        n += argv0.endswith(names)
    return n


def _ray_daemons() -> int:
    return _processes("/raylet", "/gcs_server")


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(100):  # a guard for processes to exit, not a speed bound
        if check():
            return
        await asyncio.sleep(0.1)
    assert check()


def test_eval_cli_starts_and_stops_its_own_ray(tmp_path: Path) -> None:
    before = _ray_daemons()
    out = tmp_path / "run"
    r = subprocess.run(
        [sys.executable, "-m", "envlab.cli.main", "eval", "calc", "-a", "oracle", "-n", "2",
         "-c", "2", "-o", str(out), "--json", "--backend", "ray"],
        capture_output=True, text=True, env=subprocess_env(), timeout=240,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_scored"] == 2 and len(outcomes(out)) == 2
    for _ in range(100):  # a guard for the daemons' exit, not a speed bound
        if _ray_daemons() == before:
            break
        time.sleep(0.1)
    assert _ray_daemons() == before  # the instance it started is gone with it
