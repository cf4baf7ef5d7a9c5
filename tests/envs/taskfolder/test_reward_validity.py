"""The one rule for a valid grade, attacked through the reward files a task's test.sh writes.

Each fixture task's test.sh copies a forged reward file (out of range, not a plain number,
not finite, malformed) into /logs/verifier. The grade of such a task is not valid: the episode
is scored 0 with ``grader_failed`` set (status ok), never ``infra_error`` (excluded) and never the
forged number. The run survives ``--resume`` with every such episode still scored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from envlab.core import Reward, Status, Trajectory
from envlab.envs.taskfolder import TerminalEnv, TerminalEpisode
from envlab.rollout import EpisodeConfig
from envlab.runs import TrajectoryStore
from tests.conftest import subprocess_env
from tests.envs.taskfolder.conftest import episode, make_task
from tests.sandbox.conftest import requires_bwrap

pytestmark = [requires_bwrap]

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]

# (file test.sh writes, its exact content); none of them is a valid grade
FORGED: dict[str, tuple[str, str]] = {
    "txt-minus-one": ("reward.txt", "-1\n"),
    "txt-five": ("reward.txt", "5\n"),
    "txt-1e9": ("reward.txt", "1e9\n"),
    "txt-underscore": ("reward.txt", "1_0\n"),  # float("1_0") == 10.0
    "txt-arabic-indic-one": ("reward.txt", "\u0661\n"),  # float("١") == 1.0
    "txt-fullwidth-one": ("reward.txt", "\uff11\n"),  # float("１") == 1.0
    "txt-nan": ("reward.txt", "NaN\n"),
    "txt-inf": ("reward.txt", "inf\n"),
    "txt-true": ("reward.txt", "true\n"),
    "txt-empty": ("reward.txt", ""),
    "txt-garbage": ("reward.txt", "\x00\x7f\ufffdpassed!\n"),
    "json-components-above-one": ("reward.json", '{"a": 2, "b": 4}'),
    "json-components-overflow": ("reward.json", '{"a": 1e308, "b": 1e308}'),
    "json-one-component-above-one": ("reward.json", '{"reward": 1, "bonus": 5}'),
    "json-nan": ("reward.json", "NaN"),
    "json-nan-component": ("reward.json", '{"reward": NaN}'),
    "json-true": ("reward.json", "true"),
    "json-true-component": ("reward.json", '{"reward": true}'),
    "json-nested": ("reward.json", '{"reward": {"reward": 1}}'),
    "json-list": ("reward.json", "[1]"),
    "json-1e9": ("reward.json", "1e9"),
    "json-empty": ("reward.json", ""),
    "json-garbage": ("reward.json", "{reward: 1"),
}


def forged_task(root: Path, name: str, file: str, content: str, toml: str = "") -> Path:
    path = make_task(root, name, test_sh=f"cat /tests/forged > /logs/verifier/{file}\n", toml=toml)
    (path / "tests" / "forged").write_bytes(content.encode())  # exact bytes, no dedent
    return path


def assert_grader_failed(traj: Trajectory, what: str) -> None:
    assert traj.status is not Status.INFRA_ERROR, f"{what}: excluded as infra_error: {traj.error}"
    assert traj.status is Status.OK, f"{what}: {traj.status} {traj.error}"
    assert traj.reward == 0.0, f"{what}: scored {traj.reward}"
    assert traj.grader_failed, f"{what}: reward {traj.reward} but grader_failed is not set"


@pytest.mark.parametrize("case", sorted(FORGED))
async def test_a_forged_reward_is_grader_failed(tmp_path: Path, case: str) -> None:
    file, content = FORGED[case]
    traj = await episode(forged_task(tmp_path, case, file, content), "noop")
    assert_grader_failed(traj, case)


@pytest.mark.parametrize(
    ("file", "content", "want"),
    [("reward.txt", "0.25\n", 0.25), ("reward.json", '{"reward": 1, "style": 0.5}', 1.0)],
)
async def test_a_valid_reward_is_scored_as_written(
    tmp_path: Path, file: str, content: str, want: float
) -> None:
    """Control: the fixture passes valid rewards through untouched."""
    traj = await episode(forged_task(tmp_path, "valid", file, content), "noop")
    assert traj.status is Status.OK and traj.reward == want and not traj.grader_failed


async def test_a_declared_reward_range_is_normalised(tmp_path: Path) -> None:
    toml = "[metadata]\nreward_range = [0, 10]\n"
    traj = await episode(forged_task(tmp_path, "ranged", "reward.txt", "5\n", toml), "noop")
    assert traj.status is Status.OK and not traj.grader_failed, traj.grader_failed
    assert traj.reward == 0.5


async def test_a_reward_outside_the_declared_range_is_grader_failed(tmp_path: Path) -> None:
    toml = "[metadata]\nreward_range = [0, 10]\n"
    traj = await episode(forged_task(tmp_path, "ranged", "reward.txt", "11\n", toml), "noop")
    assert_grader_failed(traj, "11 in [0, 10]")


class CountingEpisode(TerminalEpisode):
    """The real ``TerminalEpisode``, counting how often the verifier ran on the frozen state."""

    runs: ClassVar[list[str]] = []

    async def regrade(self) -> Reward:
        CountingEpisode.runs.append("regrade")
        return await super().regrade()


class CountingTerminalEnv(TerminalEnv):
    environment = CountingEpisode


async def test_a_failed_grade_is_run_once_more_then_scored_zero(tmp_path: Path) -> None:
    CountingEpisode.runs.clear()
    spec = CountingTerminalEnv(forged_task(tmp_path, "twice", "reward.txt", "5\n"))
    traj = await episode(None, "noop", spec=spec, config=EpisodeConfig(max_retries=2))
    assert_grader_failed(traj, "5")
    assert traj.attempts == 1, "an invalid grade is regraded, never retried as infra"
    assert CountingEpisode.runs.count("regrade") == 1, CountingEpisode.runs


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=600
    )


CLI_CASES = sorted(FORGED)


async def test_eval_and_resume_keep_every_forged_episode_scored_zero(tmp_path: Path) -> None:
    """``envlab eval DIR --agent noop`` then ``--resume``: the forged episodes stay scored (0,
    grader_failed), the summary counts them, nothing is null or excluded."""
    tasks = tmp_path / "tasks"
    for case in CLI_CASES:
        forged_task(tasks, case, *FORGED[case])
    forged_task(tasks, "valid", "reward.txt", "0.25\n")
    out = tmp_path / "run"
    common = ["eval", str(tasks), "--agent", "noop", "--out", str(out), "--json", "-c", "3"]
    first = envlab(*common)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    assert summary["n_excluded"] == 0, summary["status_counts"]
    assert summary["n_grader_failed"] == len(CLI_CASES)
    assert summary["n_scored"] == len(CLI_CASES) + 1
    assert summary["mean_reward"] == pytest.approx(0.25 / (len(CLI_CASES) + 1))

    again = envlab(*common, "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    trajs = {t.task_id: t for t in TrajectoryStore(out / "trajectories.jsonl").load()}
    assert sorted(trajs) == sorted([*CLI_CASES, "valid"])
    for case in CLI_CASES:
        assert_grader_failed(trajs[case], f"{case} after --resume")
    assert trajs["valid"].reward == 0.25
    resumed = json.loads(again.stdout)
    assert resumed["n_scored"] == len(CLI_CASES) + 1 and resumed["n_grader_failed"] == len(
        CLI_CASES
    )
