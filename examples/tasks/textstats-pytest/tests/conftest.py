"""The code under test runs in a child process of its own, never inside pytest (so it cannot
patch the test runner or rewrite its report); each call's answer comes back as JSON."""

import json
import subprocess
import sys

import pytest

_CHILD = """
import json, sys
sys.path.append("/app")
import textstats
name, args = json.load(sys.stdin)
print(json.dumps(getattr(textstats, name)(*args)))
"""


class _Remote:
    def __getattr__(self, name):
        def call(*args):
            out = subprocess.run(
                [sys.executable, "-P", "-c", _CHILD],
                input=json.dumps([name, list(args)]),
                capture_output=True,
                text=True,
                timeout=60,
                cwd="/tmp",
            )
            assert out.returncode == 0, out.stderr[-2000:]
            lines = out.stdout.strip().splitlines()
            assert lines, "textstats printed nothing"
            return json.loads(lines[-1])

        return call


@pytest.fixture
def textstats():
    return _Remote()


_passed: set[str] = set()
_failed: set[str] = set()


def pytest_runtest_logreport(report):
    if report.failed or report.skipped:
        _failed.add(report.nodeid)
    elif report.when == "call":
        _passed.add(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """The reward, written here: whatever the code under test left in /logs/verifier (a reward
    of its own, even made read-only) is removed first."""
    import os
    import shutil

    logs = "/logs/verifier"  # envlab's: the code under test cannot make it read-only
    for name in os.listdir(logs):
        path = os.path.join(logs, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    total = session.testscollected
    share = len(_passed - _failed) / total if total else 0.0
    with open(os.path.join(logs, "reward.json"), "w") as f:
        json.dump({"reward": share}, f)
