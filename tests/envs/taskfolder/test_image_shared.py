"""Harbor's shared verifier mode in an image: a server the agent starts is there for the tests;
in the default (separate) mode it is not, and nothing of the agent's runs while it is graded."""

from __future__ import annotations

from pathlib import Path

from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host, write_task
from tests.envs.taskfolder.test_image_grading import episode, score

image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host

DOCKERFILE = "FROM envlab-test/tiny:1\nWORKDIR /app\n"
# a "server": a background process that answers by keeping a file fresh
SERVE = "(while true; do date +%s%N > /tmp/alive; sleep 0.1; done) >/dev/null 2>&1 &\n"
TEST_ALIVE = (
    "a=$(cat /tmp/alive 2>/dev/null); sleep 1; b=$(cat /tmp/alive 2>/dev/null)\n"
    'if [ -n "$a" ] && [ "$a" != "$b" ]; then echo 1 > /logs/verifier/reward.txt; '
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)
SHARED = '[verifier]\nenvironment_mode = "shared"\n'


def _task(root: Path, name: str, toml: str) -> Path:
    body = "[agent]\ntimeout_sec = 60\n" + (toml or "[verifier]\n") + "timeout_sec = 60\n"
    task = write_task(root, name, DOCKERFILE, test_sh=TEST_ALIVE, solve_sh=SERVE)
    (task / "task.toml").write_text(body)
    return task


def test_a_server_the_agent_started_serves_the_tests_in_shared_mode(
    tiny_base: str, tmp_path: Path
) -> None:
    task = _task(tmp_path, "shared", SHARED)
    out = episode(task, oracle=True)
    assert score(out) == 1.0
    assert out["grades"][0].details["verifier_mode"] == "shared"
    assert score(episode(task)) == 0.0  # the no-op started nothing


def test_in_the_default_mode_the_agents_processes_are_gone_before_grading(
    tiny_base: str, tmp_path: Path
) -> None:
    task = _task(tmp_path, "separate", "")
    assert score(episode(task, oracle=True)) == 0.0


def test_shared_mode_wipes_a_reward_the_agent_wrote_early(tiny_base: str, tmp_path: Path) -> None:
    task = _task(tmp_path, "forged", SHARED)
    out = episode(task, commands=("echo 1 > /logs/verifier/reward.txt",))
    assert score(out) == 0.0


def test_shared_mode_tests_dir_is_empty_and_read_only_for_the_agent(
    tiny_base: str, tmp_path: Path
) -> None:
    task = _task(tmp_path, "peek", SHARED)
    out = episode(task, commands=("ls -A /tests; echo x > /tests/test.sh; echo rc=$?",))
    shown = out["outputs"][0]
    assert "rc=1" in shown or "Read-only" in shown
    assert "test.sh\\n" not in shown.split("rc=")[0]
