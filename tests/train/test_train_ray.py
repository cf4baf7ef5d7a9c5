"""``envlab train --backend ray`` on a real local Ray (num_cpus=2): the episodes on actors, the
learner here. Sync training is deterministic, so the two backends must agree on every episode
id; a worker killed mid-run loses and duplicates nothing and changes no result."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError, Trajectory
from envlab.runs import TrajectoryStore
from envlab.runs.metrics import StepMetrics, read_metrics
from envlab.train.checkpoint import LoopState
from envlab.train.config import TrainConfig

ray = pytest.importorskip("ray")
pytest.importorskip("torch")  # checkpoints are torch files


@pytest.fixture(scope="module", autouse=True)
def ray_instance() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


CFG = TrainConfig(steps=3, groups_per_step=2, group_size=4, sync=True, concurrency=2, seed=3)


def _train(out: Path, backend: str, observer: Any = None, learner: Any = None) -> Any:
    from envlab.cli.options import open_env
    from envlab.cli.train_cmd import open_learner
    from envlab.train.loop import train

    spec = open_env("triage", {})
    tasks = spec.tasks(seed=3, n=20, split="train")
    learner = learner or open_learner("decision", spec, tasks, {})
    run = train(spec, tasks, learner, out_dir=out, config=CFG, observer=observer,
                command=["t"], backend=backend)  # fmt: skip
    return asyncio.run(run)


def _episodes(out: Path) -> dict[str, tuple[Any, ...]]:
    trajs = TrajectoryStore(out / "trajectories.jsonl").load(every_record=True)
    ids = [t.episode_id for t in trajs]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    return {t.episode_id: _outcome(t) for t in trajs}


def _outcome(t: Trajectory) -> tuple[Any, ...]:
    info = t.info
    return (t.task_id, t.seed, t.status.value, t.reward, info["policy_version"],
            info.get("learner_step"), info.get("dropped"))  # fmt: skip


def _curve(out: Path) -> list[tuple[int, float, int]]:
    return [(m.step, m.reward_mean, m.samples) for m in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local") / "run"
    _train(out, "local")
    return out


def test_ray_trains_as_local_does(local_run: Path, tmp_path: Path) -> None:
    _train(tmp_path / "ray", "ray")
    local, remote = _episodes(local_run), _episodes(tmp_path / "ray")
    assert len(local) == 3 * 2 * 4 and remote == local
    assert _curve(tmp_path / "ray") == _curve(local_run)


class KillsAWorker:
    """A train observer that SIGKILLs one Ray episode worker after the 5th episode."""

    def __init__(self) -> None:
        self.seen, self.killed = 0, 0

    def started(self, config: TrainConfig, state: LoopState) -> None:
        pass

    def episode(self, trajectory: Trajectory) -> None:
        self.seen += 1
        if self.seen == 5 and not self.killed:
            pids = _worker_pids()
            assert pids, "no Ray episode worker to kill"
            os.kill(pids[0], signal.SIGKILL)
            self.killed = pids[0]

    def stepped(self, metrics: StepMetrics) -> None:
        pass


def _worker_pids() -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv0 = cmdline.read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.endswith("ray::EpisodeWorker"):
            pids.append(int(cmdline.parent.name))
    return sorted(pids)


def test_a_worker_killed_mid_training_changes_nothing(local_run: Path, tmp_path: Path) -> None:
    observer = KillsAWorker()
    _train(tmp_path / "ray", "ray", observer)
    assert observer.killed
    trajs = TrajectoryStore(tmp_path / "ray" / "trajectories.jsonl").load(every_record=True)
    lost = [t for t in trajs if "ray_workers_lost" in t.info]
    # the killed worker's episode (if it was running one) was run again, once, on a fresh actor
    assert all(t.attempts == 2 and t.status.value == "ok" for t in lost)
    strip = {k: v[:5] + v[6:] for k, v in _episodes(local_run).items()}
    assert {k: v[:5] + v[6:] for k, v in _episodes(tmp_path / "ray").items()} == strip
    assert _curve(tmp_path / "ray") == _curve(local_run)


class HoldsALock:
    """A learner whose policy holds a lock in this process, as an in-process LM's does."""

    version = 0

    def policy(self) -> Any:
        from envlab.core import AgentClass

        return AgentClass(_LockedRandom, threading.Lock())

    def step(self, batch: Any) -> dict[str, float]:
        self.version += 1
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.version = int(state["version"])


def _LockedRandom(lock: Any) -> Any:
    from envlab.agents.scripted import RandomAgent

    return RandomAgent()


def test_a_policy_that_cannot_leave_this_process_is_refused_up_front(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"Serve it \(envlab\.train\.served.*--backend local"):
        _train(tmp_path / "ray", "ray", learner=HoldsALock())
    assert not (tmp_path / "ray" / "trajectories.jsonl").exists() or not _episodes(tmp_path / "ray")


def test_the_cli_trains_and_measures_held_out_on_ray(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from envlab.cli.main import app

    args = ["train", "triage", "--steps", "2", "--groups-per-step", "2", "--group-size", "4",
            "--sync", "-c", "2", "--train-tasks", "20", "--eval-tasks", "6", "--json"]  # fmt: skip
    runs = {}
    for backend in ("local", "ray"):
        out = tmp_path / backend
        res = CliRunner().invoke(app, [*args, "--backend", backend, "--out", str(out)])
        assert res.exit_code == 0, res.output
        runs[backend] = json.loads(res.stdout)
        assert _episodes(out) and _held_out(out / "eval" / "trained")
    assert _episodes(tmp_path / "ray") == _episodes(tmp_path / "local")
    for name in ("trained", "random", "optimum"):
        a, b = tmp_path / "local" / "eval" / name, tmp_path / "ray" / "eval" / name
        assert _held_out(b) == _held_out(a)
    rows = [[(r["name"], r["mean"]) for r in runs[k]["heldout"]["rows"]] for k in runs]
    # the same rewards, summed in the order episodes finished: equal to the last bits
    assert [n for n, _ in rows[0]] == [n for n, _ in rows[1]]
    assert [m for _, m in rows[0]] == pytest.approx([m for _, m in rows[1]], rel=1e-12)


def _held_out(run: Path) -> dict[str, tuple[Any, ...]]:
    trajs = TrajectoryStore(run / "trajectories.jsonl").load()
    return {t.episode_id: (t.task_id, t.status.value, t.reward) for t in trajs}
