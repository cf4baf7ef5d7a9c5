"""The reward contract: a number or named components; anything else is an infra_error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlab.core import InfraError, Status
from envlab.envs.taskfolder import read_reward
from envlab.rollout import EpisodeConfig
from envlab.sandbox import ExecResult
from tests.envs.taskfolder.conftest import episode, make_task
from tests.sandbox.conftest import requires_bwrap

OK = ExecResult("", "", 0)


def logs(tmp_path: Path, **files: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name.replace("_", ".", 1)).write_text(text)
    return tmp_path


def test_reward_txt_and_json_components(tmp_path: Path) -> None:
    assert read_reward(logs(tmp_path / "a", reward_txt="0.25\n"), OK, 1).total == 0.25
    r = read_reward(logs(tmp_path / "b", reward_json='{"reward": 1, "style": 0.5}'), OK, 1)
    assert r.total == 1.0 and r.components == {"reward": 1.0, "style": 0.5}
    r = read_reward(logs(tmp_path / "c", rewards_json='{"a": 1, "b": 0}'), OK, 1)
    assert r.total == 0.5 and r.components == {"a": 1.0, "b": 0.0}
    r = read_reward(logs(tmp_path / "d", reward_txt="1", reward_json='{"x": 0}'), OK, 1)
    assert r.total == 1.0 and r.components == {"x": 0.0}


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({}, "wrote no reward"),
        ({"reward_txt": ""}, "empty"),
        ({"reward_txt": "passed"}, "not a number"),
        ({"reward_txt": "nan"}, "not a finite number"),
        ({"reward_json": "{"}, "not valid JSON"),
        ({"reward_json": '{"a": "high"}'}, "not a number"),
        ({"reward_json": "[]"}, "non-empty object"),
    ],
)
def test_a_bad_or_missing_reward_is_an_infra_error(
    tmp_path: Path, files: dict[str, str], why: str
) -> None:
    tmp_path.mkdir(exist_ok=True)
    with pytest.raises(InfraError, match=why):
        read_reward(logs(tmp_path, **files), ExecResult("", "trace", 2), 1)


def test_a_reward_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("0.99")
    (tmp_path / "logs").mkdir()
    os.symlink(secret, tmp_path / "logs" / "reward.txt")
    with pytest.raises(InfraError, match="unreadable"):
        read_reward(tmp_path / "logs", OK, 1)


def test_a_verifier_timeout_is_an_infra_error(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match="timeout_sec = 5"):
        read_reward(logs(tmp_path, reward_txt="1"), ExecResult("", "", 137, timed_out=True), 5)


@requires_bwrap
@pytest.mark.parametrize(
    ("test_sh", "toml", "why"),
    [
        ("exit 3\n", "", "wrote no reward"),
        ("echo maybe > /logs/verifier/reward.txt\n", "", "not a number"),
        ("sleep 30\n", "[verifier]\ntimeout_sec = 1\n", "took longer than"),
    ],
)
async def test_verifier_failures_end_the_episode_as_infra_error(
    tmp_path: Path, test_sh: str, toml: str, why: str
) -> None:
    path = make_task(tmp_path, test_sh=test_sh)
    if toml:
        (path / "task.toml").write_text("[agent]\ntimeout_sec = 60\n" + toml)
    traj = await episode(path, "noop", config=EpisodeConfig(step_timeout=None, max_retries=1))
    assert traj.status is Status.INFRA_ERROR and traj.reward is None
    assert traj.attempts == 2, "retried, then given up"
    assert why in (traj.error or "")
