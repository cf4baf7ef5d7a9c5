"""Confidence intervals and gates in summaries and in ``summary.json``."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from envlab.agents import load_agent
from envlab.cli.eval_table import summary_rows
from envlab.cli.evaluate import evaluate
from envlab.core import AgentSpec, Status, Trajectory
from envlab.envs import load_env
from envlab.measure import Summary, load_run, proportion_ci, summarize
from envlab.measure.summary import rate_ci
from tests.measure.runs import make_run


def traj(task: str, i: int, reward: float | None, status: Status = Status.OK) -> Trajectory:
    return Trajectory(
        episode_id=f"{task}-{i}", task_id=task, group_id=task, sample_index=i, reward=reward,
        status=status, env_id="e", env_hash="h", seed=i, agent=AgentSpec(name="a"),
    )  # fmt: skip


def test_one_sample_per_task_binary_uses_wilson() -> None:
    ts = [traj(f"t{i}", 0, float(i % 4 == 0)) for i in range(40)]  # 10 of 40 pass
    s = summarize(ts)
    want = proportion_ci(10, 40)
    assert s.mean_reward_ci == want and s.pass_rate_ci == want
    assert s.pass_at_k_ci[1].low == pytest.approx(want.low)
    assert s.samples_per_task == 1


def test_several_samples_cluster_by_task() -> None:
    rng = np.random.default_rng(0)
    rewards = rng.uniform(size=(25, 3))
    ts = [traj(f"t{i}", j, float(rewards[i, j])) for i in range(25) for j in range(3)]
    s = summarize(ts)
    assert s.mean_reward_ci is not None and s.mean_reward_ci.method == "clustered-t"
    ref = stats.ttest_1samp(rewards.mean(axis=1), 0.0).confidence_interval()
    assert (s.mean_reward_ci.low, s.mean_reward_ci.high) == pytest.approx((ref.low, ref.high))
    assert s.mean_reward_ci.clusters == 25 and s.mean_reward_ci.n == 75


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_c_equals_zero_or_n_still_has_an_interval(value: float) -> None:
    ts = [traj(f"t{i}", j, value) for i in range(20) for j in range(4)]
    s = summarize(ts)
    want = proportion_ci(int(value) * 20, 20)  # counted in tasks, not in episodes
    for e in (s.mean_reward_ci, s.pass_rate_ci, s.pass_at_k_ci[4], s.pass_hat_k_ci[2]):
        assert e is not None and e.method == "wilson"
        assert (e.low, e.high) == pytest.approx((want.low, want.high))
    assert s.pass_at_k[4] == value and s.pass_hat_k[4] == value


def test_one_task_one_sample() -> None:
    s = summarize([traj("t", 0, 1.0)])
    assert s.mean_reward_ci == proportion_ci(1, 1)
    partial = summarize([traj("t", 0, 0.5)])
    assert partial.mean_reward_ci is not None and partial.mean_reward_ci.se is None
    assert partial.pass_rate == 0.0


def test_k_larger_than_some_tasks_samples() -> None:
    # task a has 2 scored samples (one infra error), task b has 3: pass@3 uses only b
    ts = [traj("a", 0, 1.0), traj("a", 1, 0.0), traj("a", 2, None, Status.INFRA_ERROR),
          traj("b", 0, 1.0), traj("b", 1, 1.0), traj("b", 2, 0.0)]  # fmt: skip
    s = summarize(ts)
    assert s.pass_at_k_ci[3].clusters == 1 and s.pass_at_k_ci[3].value == 1.0
    assert s.n_excluded == 1 and s.samples_per_task == 3
    assert {t.task_id: t.excluded for t in s.tasks} == {"a": 1, "b": 0}
    assert {t.task_id: t.success_rate for t in s.tasks} == {"a": 0.5, "b": pytest.approx(2 / 3)}


def test_intervals_of_unit_rewards_stay_in_unit_range() -> None:
    ts = [traj(f"t{i}", j, 0.02 if (i, j) == (0, 0) else 0.0) for i in range(10) for j in range(2)]
    e = summarize(ts).mean_reward_ci
    assert e is not None and e.low == 0.0 and e.high is not None and e.high > 0


def test_bootstrap_option() -> None:
    ts = [traj(f"t{i}", j, float((i + j) % 3 == 0)) for i in range(30) for j in range(2)]
    s = summarize(ts, ci_method="bootstrap")
    assert s.ci_method == "bootstrap" and s.mean_reward_ci is not None
    assert s.mean_reward_ci.method == "bootstrap"
    assert rate_ci([0.0, 1.0], ["a", "b"]).method == "wilson"


def test_gate_reported_apart_from_the_mean() -> None:
    ts = [traj("a", 0, 1.0), traj("a", 1, 1.0), traj("b", 0, 1.0), traj("b", 1, 0.0),
          traj("c", 0, None, Status.INFRA_ERROR), traj("d", 0, 0.0)]  # fmt: skip
    s = summarize(ts, must_pass=["a", "b", "c"])
    assert s.gate is not None
    assert (s.gate.passed_tasks, s.gate.failed_tasks, s.gate.unscored_tasks) == (
        ["a"],
        ["b"],
        ["c"],
    )
    assert s.gate.passed is False and "FAILED: b" in s.gate.describe()
    ok = summarize(ts, must_pass=["a"]).gate
    assert ok is not None and ok.passed is True
    undecided = summarize(ts, must_pass=["a", "c"]).gate
    assert undecided is not None and undecided.passed is None
    assert summarize(ts).gate is None


def test_old_summary_json_still_loads() -> None:
    old = {"n_tasks": 1, "n_episodes": 1, "n_scored": 1, "status_counts": {"ok": 1},
           "mean_reward": 1.0, "pass_rate": 1.0, "pass_threshold": 1.0,
           "pass_at_k": {"1": 1.0}, "pass_hat_k": {"1": 1.0}}  # fmt: skip
    s = Summary.model_validate(old)
    assert s.mean_reward_ci is None and s.gate is None and s.confidence == 0.95


def test_eval_writes_intervals_and_gate_into_summary_json(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", "arith", "random", tasks=30, samples=2,
                   must_pass=["arith-test-0-00000"])  # fmt: skip
    data = json.loads((run / "summary.json").read_text())
    ci = data["mean_reward_ci"]
    assert ci["low"] <= data["mean_reward"] <= ci["high"] and ci["clusters"] == 30
    assert set(data["pass_at_k_ci"]) == {"1", "2"}
    assert data["gate"]["must_pass"] == ["arith-test-0-00000"]
    s = Summary.model_validate(data)
    rows = dict(summary_rows(s))
    assert f"95% CI {ci['low']:.3f}-{ci['high']:.3f}" in rows["mean reward"]
    assert "must-pass tasks passed" in rows["gate (must-pass tasks)"]
    assert "95% CI" in rows["pass^2"]


def test_tasks_declare_themselves_must_pass(tmp_path: Path) -> None:
    env = load_env("arith")
    tasks = env.tasks(n=4)
    tasks[1].metadata["must_pass"] = True
    coro = evaluate(env, load_agent("oracle"), tasks, out_dir=tmp_path / "r")
    with ThreadPoolExecutor(1) as pool:
        summary = pool.submit(asyncio.run, coro).result().summary
    assert summary.gate is not None and summary.gate.must_pass == [tasks[1].id]
    assert summary.gate.passed is True
    assert load_run(tmp_path / "r").must_pass == [tasks[1].id]  # kept for compare and report
