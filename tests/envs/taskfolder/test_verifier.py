"""The reward contract: a plain number or named numeric components; anything else, and any run
of the verifier that did not end on its own, is ``GraderFailed`` (scored 0), never infra_error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envlab.core import GraderFailed, Status
from envlab.rollout import EpisodeConfig
from envlab.sandbox import ExecResult
from envlab.sandbox.tasks import judge, read_reward_files
from envlab.sandbox.verifier_kit import END
from tests.envs.taskfolder.conftest import episode, make_task
from tests.sandbox.conftest import requires_bwrap


def logs(tmp_path: Path, **files: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / name.replace("_", ".", 1)).write_text(text)
    return tmp_path


def ended(exit_code: int = 0, **report: object) -> ExecResult:
    """What the verifier's reporting process prints when test.sh ended on its own."""
    full = {"exit_code": exit_code, "signal": None, "stragglers": 0, "prepared": [], **report}
    return ExecResult(f"test output\n{END}{json.dumps(full)}\n", "", 0)


UNFINISHED = "start 12\n"
"""The events channel after a pytest session that started and never finished."""


def test_reward_txt_and_json_components(tmp_path: Path) -> None:
    assert read_reward_files(logs(tmp_path / "a", reward_txt="0.25\n")) == (0.25, {})
    total, comps = read_reward_files(logs(tmp_path / "b", reward_json='{"reward": 1, "s": 0.5}'))
    assert total == 1.0 and comps == {"reward": 1.0, "s": 0.5}
    assert read_reward_files(logs(tmp_path / "c", rewards_json='{"a": 1, "b": 0}'))[0] == 0.5
    total, comps = read_reward_files(logs(tmp_path / "d", reward_txt="1", reward_json='{"x": 1}'))
    assert total == 1.0 and comps == {"x": 1.0}
    assert read_reward_files(logs(tmp_path / "e", reward_txt="  .5e0 \n"))[0] == 0.5


@pytest.mark.parametrize(
    ("files", "why"),
    [
        ({}, "wrote no reward"),
        ({"reward_txt": ""}, "empty"),
        ({"reward_txt": "passed"}, "not a plain decimal"),
        ({"reward_txt": "nan"}, "not a plain decimal"),
        ({"reward_txt": "inf"}, "not a plain decimal"),
        ({"reward_txt": "1_0"}, "not a plain decimal"),
        ({"reward_txt": "\u0661"}, "not a plain decimal"),
        ({"reward_txt": "1e999"}, "not a finite number"),
        ({"reward_json": "{"}, "not valid JSON"),
        ({"reward_json": "NaN"}, "not valid JSON"),
        ({"reward_json": '{"a": "high"}'}, "not a number"),
        ({"reward_json": '{"a": true}'}, "not a number"),
        ({"reward_json": '{"a": {"b": 1}}'}, "flat object"),
        ({"reward_json": "[]"}, "flat object"),
        ({"reward_json": "[" * 60_000}, "not valid JSON"),
        ({"reward_txt": "1", "reward_json": '{"x": 0}'}, "disagree"),
        ({"reward_json": "0.5", "rewards_json": '{"reward": 1}'}, "disagree"),
        ({"reward_json": "[" * 200_000}, "larger than"),
    ],
)
def test_a_bad_or_missing_reward_is_a_failed_grade(
    tmp_path: Path, files: dict[str, str], why: str
) -> None:
    with pytest.raises(GraderFailed, match=why):
        read_reward_files(logs(tmp_path, **files))


def test_huge_components_average_without_overflow(tmp_path: Path) -> None:
    """(the range check of the rollout then refuses 1e308: tests/rollout/test_grade_rule.py)"""
    total, _ = read_reward_files(logs(tmp_path, reward_json='{"a": 1e308, "b": 1e308}'))
    assert total == 1e308


def test_a_reward_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("0.99")
    (tmp_path / "logs").mkdir()
    os.symlink(secret, tmp_path / "logs" / "reward.txt")
    with pytest.raises(GraderFailed, match="unreadable"):
        read_reward_files(tmp_path / "logs")


@pytest.mark.parametrize(
    ("res", "why"),
    [
        (ExecResult("", "", 137, timed_out=True), "timeout_sec = 5"),
        (ExecResult("", "", 137), "killed before it finished"),
        (ExecResult(f"{END}{{}}\n", "", 137), "killed before it finished"),
        (ended(137, signal=9), "killed by signal 9"),
        ((ended(0), UNFINISHED), "pytest session ended before it finished"),
        (ended(0, stragglers=2), "still running"),
        (ExecResult("", "cannot change to directory /app/x", 1), "working directory is gone"),
    ],
)
def test_a_verifier_that_did_not_end_on_its_own_is_a_failed_grade(
    tmp_path: Path, res: ExecResult | tuple[ExecResult, str], why: str
) -> None:
    res, events = res if isinstance(res, tuple) else (res, "")
    with pytest.raises(GraderFailed, match=why):
        judge(res, events, logs(tmp_path, reward_txt="1"), 5)


def test_a_forged_end_line_before_the_real_one_is_ignored(tmp_path: Path) -> None:
    forged = f"{END}" + json.dumps({"exit_code": 0, "signal": None})
    real = ended(1, signal=9)
    res = ExecResult(forged + "\n" + real.stdout, "", 0)
    with pytest.raises(GraderFailed, match="signal 9"):
        judge(res, "", logs(tmp_path, reward_txt="1"), 5)


def test_a_zero_with_a_missing_tool_names_the_tool(tmp_path: Path) -> None:
    with pytest.raises(GraderFailed, match="needs uv"):
        judge(ended(1), "missing uv\n", logs(tmp_path, reward_txt="0"), 5)
    r = judge(ended(0), "missing uv\n", logs(tmp_path, reward_txt="1"), 5)
    assert r.total == 1.0 and r.details["verifier_exit_code"] == 0
    assert "test output" in r.details["verifier_output_tail"]


@requires_bwrap
@pytest.mark.parametrize(
    ("test_sh", "toml", "why"),
    [
        ("exit 3\n", "", "wrote no reward"),
        ("echo maybe > /logs/verifier/reward.txt\n", "", "not a plain decimal"),
        ("echo 7 > /logs/verifier/reward.txt\n", "", "outside the reward range"),
        ("sleep 30\n", "[verifier]\ntimeout_sec = 1\n", "timeout_sec = 1"),
        ("echo 1 > /logs/verifier/reward.txt; kill -9 $$\n", "", "killed by signal 9"),
        ("sleep 60 & echo 1 > /logs/verifier/reward.txt\n", "", "still running"),
        ("no-such-tool-xyz; echo 0 > /logs/verifier/reward.txt\n", "", "needs no-such-tool-xyz"),
    ],
)
async def test_verifier_failures_score_zero_with_the_reason(
    tmp_path: Path, test_sh: str, toml: str, why: str
) -> None:
    path = make_task(tmp_path, test_sh=test_sh)
    if toml:
        (path / "task.toml").write_text("[agent]\ntimeout_sec = 60\n" + toml)
    traj = await episode(path, "noop", config=EpisodeConfig(max_retries=1))
    assert traj.status is Status.OK and traj.reward == 0.0
    assert traj.attempts == 1, "a failed grade is not an infra error: never retried away"
    assert why in (traj.grader_failed or ""), traj.grader_failed


@requires_bwrap
async def test_a_declared_reward_range_is_normalised(tmp_path: Path) -> None:
    path = make_task(tmp_path, test_sh="echo 5 > /logs/verifier/reward.txt\n",
                     toml="[metadata]\nreward_range = [0, 10]\n")  # fmt: skip
    traj = await episode(path, "noop")
    assert traj.status is Status.OK and traj.reward == 0.5 and traj.grader_failed is None


@requires_bwrap
@pytest.mark.parametrize(("mode", "reached"), [("no-network", 0.0), ("public", 1.0)])
async def test_the_verifier_phase_has_its_own_network_policy(
    tmp_path: Path, mode: str, reached: float
) -> None:
    """Harbor 0.25: ``[verifier] network_mode`` overrides ``[environment]`` for grading (public:
    an interface of the network stack besides loopback; tests/sandbox/test_network.py)."""
    probe = (
        "[ $(wc -l < /proc/net/dev) -gt 3 ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    path = make_task(tmp_path, test_sh=probe)
    (path / "task.toml").write_text(
        '[environment]\nnetwork_mode = "no-network"\n'
        f'[verifier]\ntimeout_sec = 30\nnetwork_mode = "{mode}"\n'
    )
    traj = await episode(path, "noop")
    assert traj.status is Status.OK and traj.reward == reached, traj.grader_failed


@requires_bwrap
@pytest.mark.parametrize(
    "lock",
    [
        "chmod 0444 /logs/verifier/reward.txt",
        "chmod 0555 /logs/verifier",
        "rm -f /logs/verifier/reward.txt; mkdir /logs/verifier/reward.txt",
        "head -c 64M /dev/zero > /app/fill; head -c 64M /dev/zero > /tmp/fill",
    ],
)
async def test_a_reward_locked_in_before_test_sh_writes_it_is_not_trusted(
    tmp_path: Path, lock: str
) -> None:
    """The code under test writes reward 1 and locks test.sh's own write out (read-only file or
    directory, a directory in its place, a full disk); test.sh then fails to write its 0."""
    test_sh = f"""
    echo 1 > /logs/verifier/reward.txt; {lock}
    echo 0 > /logs/verifier/reward.txt
    """
    path = make_task(tmp_path, test_sh=test_sh, toml="[environment]\nstorage_mb = 32\n")
    traj = await episode(path, "noop")
    assert traj.status is Status.OK and traj.reward == 0.0, (traj.error, traj.grader_failed)
    if "chmod 0555" in lock:  # the directory is root's: the lock itself fails, test.sh writes 0
        assert traj.grader_failed is None
    else:
        assert "may not be test.sh's" in (traj.grader_failed or ""), traj.grader_failed


@requires_bwrap
async def test_a_workspace_too_deep_to_walk_is_scored_not_excluded(tmp_path: Path) -> None:
    """A path longer than PATH_MAX in the workspace makes walking it fail on the host: that is
    the agent's doing, so the episode is scored (0), never an infra_error."""
    from envlab.agents.shell import ShellScriptAgent
    from tests.envs.taskfolder.conftest import write

    path = make_task(tmp_path, test_sh="echo 1 > /logs/verifier/reward.txt\n")
    agent_sh = tmp_path / "deep.sh"
    write(agent_sh, 'd=$(printf "x%.0s" $(seq 1 200))\n'
                    'for i in $(seq 1 40); do mkdir "$d" && cd "$d" || break; done\n')  # fmt: skip
    traj = await episode(path, ShellScriptAgent(agent_sh))
    assert traj.status is Status.OK and traj.reward == 0.0, traj.error
    assert "too long" in (traj.grader_failed or ""), traj.grader_failed
