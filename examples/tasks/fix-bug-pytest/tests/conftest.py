"""The code under test runs in a child process of its own, never inside pytest: what it could do
to the test runner from inside (patch pytest, exit early, rewrite reports) cannot touch the grade.
Its only channel back is the JSON it prints: its answers, which the tests then check."""

import json
import subprocess
import sys

import pytest

_CHILD = """
import json, sys
sys.path.append("/app")
from intervals import merge
cases = json.load(sys.stdin)
print(json.dumps([[list(iv) for iv in merge([tuple(x) for x in c])] for c in cases]))
"""


@pytest.fixture(scope="session")
def merge_all():
    def run(cases):
        out = subprocess.run(
            [sys.executable, "-P", "-c", _CHILD],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/tmp",
        )
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.strip().splitlines()
        got = json.loads(lines[-1]) if lines else None
        assert isinstance(got, list) and len(got) == len(cases), out.stdout[-500:]
        return [[tuple(iv) for iv in g] for g in got]

    return run
