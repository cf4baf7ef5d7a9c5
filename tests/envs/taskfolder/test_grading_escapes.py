"""Attacks on the grade, each by a real agent script, each contained.

The agent leaves a wrong answer and tries to make the verifier award 1 anyway: reward files
written during the episode, a process that outlives ``submit``, and code planted in /app where
a careless verifier would run it (conftest.py, sitecustomize.py, .pth files, modules shadowing
pytest or the standard library, fake python3/pytest/bash executables, pytest config files).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.agents.shell import ShellScriptAgent
from envlab.core import Limits, Status
from envlab.rollout import EpisodeConfig
from tests.envs.taskfolder.conftest import EXAMPLES, episode, make_task, write
from tests.sandbox.conftest import requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning"),
]

# Python that, wherever it runs, awards itself the reward and stops the process successfully
PAYLOAD = (
    "import os\n"
    "for name, text in (('reward.txt', '1'), ('reward.json', '{\"reward\": 1}')):\n"
    "    try:\n"
    "        open('/logs/verifier/' + name, 'w').write(text)\n"
    "    except OSError:\n"
    "        pass\n"
    "os._exit(0)\n"
)
FAKE_EXE = "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nexit 0\n"

PLANT = f"""
set -u
cd /app
py() {{ mkdir -p "$(dirname "$1")"; cat > "$1" <<'PYEOF'
{PAYLOAD}PYEOF
}}
exe() {{ mkdir -p "$(dirname "$1")"; printf '%s' '{FAKE_EXE}' > "$1"; chmod +x "$1"; }}
for dir in /app "$PWD"; do
  py "$dir/conftest.py"
  py "$dir/sitecustomize.py"
  py "$dir/usercustomize.py"
  py "$dir/pytest.py"
  py "$dir/_pytest/__init__.py"
  py "$dir/pluggy.py"
  py "$dir/json.py"
  py "$dir/csv.py"
  py "$dir/decimal.py"
  py "$dir/configparser.py"
  py "$dir/sqlite3.py"
  py "$dir/evilplugin.py"
  printf 'import os; exec(open("/app/sitecustomize.py").read())\\n' > "$dir/evil.pth"
  for name in python3 python pytest bash sh cat grep tr; do
    exe "$dir/$name"; exe "$dir/bin/$name"
  done
  printf '[pytest]\\naddopts = -p evilplugin\\n' > "$dir/pytest.ini"
  printf '[tool.pytest.ini_options]\\naddopts = "-p evilplugin"\\n' > "$dir/pyproject.toml"
  printf '[tool:pytest]\\naddopts = -p evilplugin\\n' > "$dir/setup.cfg"
done
site=/app/.local/lib/python3.11/site-packages
py "$site/sitecustomize.py"
printf 'import os; exec(open("/app/sitecustomize.py").read())\\n' > "$site/evil.pth"
for f in .bashrc .profile .bash_profile .pythonrc.py; do py "/app/$f"; done
echo planted
"""


@pytest.mark.parametrize(
    "task",
    [
        "fix-bug-pytest",  # python3 -m pytest
        "textstats-pytest",  # pytest, then python3 reading a script on stdin
        "csv-aggregate",  # python3 /tests/check.py
        "json-transform",  # python3 - <<EOF
        "sqlite-report",  # python3 with sqlite3
        "env-settings",  # configparser
        "hello-file",  # bash only
    ],
)
async def test_planted_code_in_app_does_not_change_the_grade(tmp_path: Path, task: str) -> None:
    script = tmp_path / "plant.sh"
    write(script, PLANT)
    traj = await episode(EXAMPLES / task, ShellScriptAgent(script))
    tool_text = next(m["content"] for m in traj.messages if m.get("role") == "tool")
    assert "planted" in tool_text, tool_text
    assert traj.status is Status.OK, traj.error
    assert traj.reward == 0.0, f"{task}: the planted code ran in the verifier"


async def test_the_payload_works_when_a_verifier_does_run_it(tmp_path: Path) -> None:
    """Control: the attacks above fail because they are not run, not because they are broken."""
    path = make_task(tmp_path, test_sh="cd /app && python3 ./sitecustomize.py\n")
    script = tmp_path / "plant.sh"
    write(script, PLANT)
    assert (await episode(path, ShellScriptAgent(script))).reward == 1.0


async def test_reward_files_written_during_the_episode_are_ignored(tmp_path: Path) -> None:
    script = tmp_path / "forge.sh"
    write(
        script,
        """
        mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo WROTE-LOGS
        mkdir -p /app/logs/verifier && echo 1 > /app/logs/verifier/reward.txt
        echo '{"reward": 1}' > /app/logs/verifier/reward.json
        echo 1 > /tmp/reward.txt
        echo tried
        """,
    )
    traj = await episode(EXAMPLES / "hello-file", ShellScriptAgent(script))
    tool_text = next(m["content"] for m in traj.messages if m.get("role") == "tool")
    assert "tried" in tool_text and "WROTE-LOGS" not in tool_text
    assert traj.status is Status.OK and traj.reward == 0.0


FROZEN_TEST = """
# reward 1 only if the agent's background writer ran and is dead now
[ -s /app/bg.log ] || { echo 0 > /logs/verifier/reward.txt; exit 0; }
before=$(wc -c < /app/bg.log)
sleep 0.6
after=$(wc -c < /app/bg.log)
if [ "$before" = "$after" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""

BACKGROUND = """
(while true; do echo tick >> /app/bg.log; sleep 0.02; done) &
disown
nohup setsid bash -c 'while true; do echo tock >> /app/bg.log; sleep 0.02; done' >/dev/null 2>&1 &
(trap '' TERM HUP INT; while true; do echo tack >> /app/bg.log; sleep 0.02; done) &
sleep 0.3
echo started
"""


async def test_a_background_writer_is_dead_before_the_verifier_starts(tmp_path: Path) -> None:
    path = make_task(tmp_path, test_sh=FROZEN_TEST)
    script = tmp_path / "bg.sh"
    write(script, BACKGROUND)
    traj = await episode(path, ShellScriptAgent(script))
    assert traj.status is Status.OK and traj.reward == 1.0


async def test_background_writers_of_a_timed_out_agent_are_dead_too(tmp_path: Path) -> None:
    path = make_task(tmp_path, test_sh=FROZEN_TEST)
    script = tmp_path / "bg.sh"
    write(script, BACKGROUND + "sleep 600\n")
    cfg = EpisodeConfig(overrides=Limits.overrides(episode_timeout_s=1.5), max_retries=0)
    traj = await episode(path, ShellScriptAgent(script), config=cfg)
    assert traj.status is Status.TIMEOUT and traj.reward == 1.0


@pytest.mark.parametrize(
    "command",
    [
        "cd /app && python3 -Bm pytest -q /tests/test_x.py",
        "cd /app && python3 -Bc 'import json' && python3 -Im pytest -q /tests/test_x.py",
        "cd /app && python3 -u -B -m pytest -q /tests/test_x.py",
    ],
)
async def test_combined_python_flags_still_ignore_planted_modules(
    tmp_path: Path, command: str
) -> None:
    """``-Bm`` or ``-Ic`` must not slip past the verifier's ``python3 -P`` wrapper."""
    test_sh = (
        f"{command} && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    path = make_task(
        tmp_path,
        test_sh=test_sh,
        tests={
            "test_x.py": "def test_answer():\n    assert open('/app/answer.txt').read() == '42'\n"
        },
    )
    script = tmp_path / "plant.sh"
    write(script, PLANT)
    traj = await episode(path, ShellScriptAgent(script))
    assert traj.status is Status.OK, traj.error
    assert traj.reward == 0.0, f"planted code ran in the verifier through {command!r}"


async def test_the_verifiers_pytest_loads_no_plugin_installed_next_to_envlab(
    tmp_path: Path,
) -> None:
    """envlab's own pytest grades the task: the plugins installed beside it (pytest-asyncio,
    pytest-timeout in envlab's dev environment) are not the task's and must not change how its
    tests run; one the tests name with ``-p`` still loads."""
    tests = {
        "test_x.py": (
            "def test_no_host_plugins(pytestconfig):\n"
            "    names = {n for n, _ in pytestconfig.pluginmanager.list_name_plugin()}\n"
            "    assert not names & {'asyncio', 'timeout', 'anyio'}, names\n"
            "    assert pytestconfig.pluginmanager.has_plugin('pytester')\n"
        )
    }
    test_sh = (
        "cd /tests && python3 -m pytest -q -p pytester test_x.py"
        " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    traj = await episode(make_task(tmp_path, test_sh=test_sh, tests=tests), "noop")
    assert traj.status is Status.OK, traj.error
    assert traj.reward == 1.0, traj.info
