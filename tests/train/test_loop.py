"""The async train loop: versions, the staleness bound, infra exclusion, sync determinism."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError
from envlab.runs import TrajectoryStore
from envlab.runs.metrics import read_metrics
from envlab.train.learner import POLICY_VERSION
from envlab.train.loop import TrainConfig, train
from tests.support.bandit import BanditConfig, BanditEnv, TableLearner

pytest.importorskip("torch")  # checkpoints are torch files


def _run(tmp: Path, learner: TableLearner, env: BanditEnv, **cfg: Any) -> Any:
    config = TrainConfig(**{"steps": 8, "groups_per_step": 3, "group_size": 4, **cfg})
    return asyncio.run(train(env, env.tasks(), learner, out_dir=tmp, config=config, command=["t"]))


def _trajectories(run: Path) -> list[Any]:
    return TrajectoryStore(run / "trajectories.jsonl").load(every_record=True)


def test_every_trajectory_has_its_policy_version_and_the_policy_learns(tmp_path: Path) -> None:
    learner = TableLearner()
    result = _run(tmp_path, learner, BanditEnv(), steps=12)
    trajs = _trajectories(tmp_path)
    assert trajs and all(isinstance(t.info[POLICY_VERSION], int) for t in trajs)
    learned = [t for t in trajs if "learner_step" in t.info]
    assert len(learned) == 12 * 3 * 4  # every learned sample is in the run, once
    assert len({t.episode_id for t in trajs}) == len(trajs)
    assert [m.step for m in result.metrics] == list(range(1, 13))
    first = sum(m.reward_mean for m in result.metrics[:3]) / 3
    last = sum(m.reward_mean for m in result.metrics[-3:]) / 3
    assert last > first + 0.2, (first, last)
    assert (tmp_path / "reward.png").stat().st_size > 1000
    assert json.loads((tmp_path / "run.json").read_text())["env_id"] == "bandit"


def test_a_slow_learner_never_gets_samples_older_than_the_bound(tmp_path: Path) -> None:
    """The learner is slow and one task's episodes are slower still (overtaken by later
    groups): whatever arrives older than max_staleness is dropped, never learned from."""
    env = BanditEnv(BanditConfig(n=6, delay=0.01, slow=("t1",), slow_delay=0.6))
    learner = TableLearner(delay=0.15)
    result = _run(tmp_path, learner, env, steps=10, max_staleness=1, concurrency=64)
    ages = [s["version"] - v for s in learner.seen for _, v, _, _ in s["samples"]]
    assert max(ages) <= 1
    assert 1 in ages, "async: some samples come from the previous version"
    dropped = [t for t in _trajectories(tmp_path) if t.info.get("dropped") == "stale"]
    assert result.state.dropped_stale > 0 and dropped
    learned_ids = {e for s in learner.seen for *_, e in s["samples"]}
    assert not learned_ids & {t.episode_id for t in dropped}
    total = sum(int(k) * v for m in result.metrics for k, v in m.staleness.items())
    assert total == sum(ages)  # the metrics' histogram is what the learner got


def test_sync_learns_only_from_the_current_version(tmp_path: Path) -> None:
    learner = TableLearner(delay=0.05)
    env = BanditEnv(BanditConfig(delay=0.01))
    _run(tmp_path, learner, env, sync=True, max_staleness=3)
    assert {s["version"] - v for s in learner.seen for _, v, _, _ in s["samples"]} == {0}


def test_infra_failures_never_enter_a_batch(tmp_path: Path) -> None:
    env = BanditEnv(BanditConfig(infra_every=3))
    learner = TableLearner()
    result = _run(tmp_path, learner, env)
    assert all(st == "ok" for s in learner.seen for _, _, st, _ in s["samples"])
    excluded = [t for t in _trajectories(tmp_path) if t.status.value == "infra_error"]
    assert excluded and all(t.info["excluded"] == "infra_error" for t in excluded)
    assert result.metrics[-1].excluded_samples == len(excluded)
    learned_ids = {e for s in learner.seen for *_, e in s["samples"]}
    assert not learned_ids & {t.episode_id for t in excluded}


def test_same_seed_same_sync_result(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        learner = TableLearner()
        result = _run(tmp_path / name, learner, BanditEnv(), sync=True, seed=7)
        runs.append((learner.state_dict(), [m.reward_mean for m in result.metrics]))
    assert runs[0] == runs[1]
    other = TableLearner()
    _run(tmp_path / "c", other, BanditEnv(), sync=True, seed=8)
    assert other.state_dict() != runs[0][0]


def test_resume_refuses_other_settings_and_finished_runs_extend(tmp_path: Path) -> None:
    _run(tmp_path, TableLearner(), BanditEnv(), steps=4, checkpoint_every=2)
    with pytest.raises(ConfigError, match="already holds a run"):
        _run(tmp_path, TableLearner(), BanditEnv(), steps=4)
    config = TrainConfig(steps=4, groups_per_step=2, group_size=4)
    with pytest.raises(ConfigError, match="differs"):
        asyncio.run(
            train(BanditEnv(), BanditEnv().tasks(), TableLearner(), out_dir=tmp_path,
                  config=config, resume=True)
        )  # fmt: skip
    learner = TableLearner()
    config = TrainConfig(steps=6, groups_per_step=3, group_size=4, checkpoint_every=2)
    result = asyncio.run(
        train(BanditEnv(), BanditEnv().tasks(), learner, out_dir=tmp_path, config=config,
              resume=True)
    )  # fmt: skip
    assert learner.version == 6 and len(learner.seen) == 2  # steps 5 and 6 only
    assert [m.step for m in read_metrics(tmp_path / "metrics.jsonl")] == list(range(1, 7))
    assert result.notes and "step 4" in result.notes[0]
