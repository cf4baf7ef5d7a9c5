from __future__ import annotations

import pytest

from envlab.core import AgentSpec, Status, Trajectory
from envlab.measure import summarize


def traj(task: str, i: int, reward: float | None, status: Status = Status.OK) -> Trajectory:
    return Trajectory(
        episode_id=f"{task}-{i}",
        task_id=task,
        group_id=task,
        sample_index=i,
        reward=reward,
        status=status,
        env_id="e",
        env_hash="h",
        seed=i,
        agent=AgentSpec(name="a"),
    )


def test_infra_errors_excluded_timeouts_counted_as_failures() -> None:
    ts = [
        traj("a", 0, 1.0),
        traj("a", 1, 0.0, Status.TIMEOUT),
        traj("a", 2, None, Status.INFRA_ERROR),
        traj("b", 0, 1.0),
        traj("b", 1, 1.0),
        traj("b", 2, 0.0, Status.AGENT_ERROR),
    ]
    s = summarize(ts)
    assert s.n_episodes == 6
    assert s.n_scored == 5
    assert s.status_counts["infra_error"] == 1
    assert s.status_counts["timeout"] == 1
    assert s.mean_reward == pytest.approx(3 / 5)
    # task a: n=2 scored, c=1; task b: n=3, c=2
    assert s.pass_at_k[1] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert s.pass_at_k[2] == pytest.approx((1.0 + (1 - 0 / 3)) / 2)
    assert s.pass_hat_k[2] == pytest.approx((0.0 + 1 / 3) / 2)
    assert s.pass_at_k[3] == pytest.approx(1.0)  # only task b has 3 scored samples


def test_pass_threshold_for_partial_rewards() -> None:
    ts = [traj("a", 0, 0.8), traj("a", 1, 1.0)]
    assert summarize(ts).pass_at_k[1] == pytest.approx(0.5)
    assert summarize(ts, pass_threshold=0.8).pass_at_k[1] == pytest.approx(1.0)


def test_empty_run() -> None:
    s = summarize([])
    assert s.mean_reward is None and s.pass_at_k == {} and s.n_episodes == 0


def test_the_one_pass_test() -> None:
    from envlab.measure import is_pass

    assert is_pass(1.0) and is_pass(sum([0.1] * 10))  # 0.9999999999999999 passes
    assert not is_pass(1.0 - 1e-6) and not is_pass(None) and not is_pass(None, 0.0)
    assert is_pass(0.5, 0.5) and not is_pass(0.49, 0.5)
    # a summary judges with it: a reward just under a threshold of 0.5 does not pass
    s = summarize([traj("a", 0, 0.5), traj("a", 1, 0.4999)], pass_threshold=0.5)
    assert s.pass_rate == 0.5 and s.tasks[0].passed == 1
