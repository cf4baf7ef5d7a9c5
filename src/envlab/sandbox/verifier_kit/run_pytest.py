"""``pytest`` as the verifier runs it in the host mode: ``python3 -P run_pytest.py ARGS``.

It registers ``envlab_pytest_guard`` (beside it in the kit), which reports the start and the end
of the test session on envlab's events channel, so that a session cut short (``os._exit(0)`` at
import in the code under test, a kill) is known to have never finished, whatever exit code it
left behind, and which taints the session (never finished, exit 3) when code the tests import
changes pytest under it (its functions, classes, hook implementations, the session's counts);
and it ends the process itself once the session is over, so that no ``atexit`` handler the code
under test registered can change the exit code or the files pytest wrote.

What it cannot do: code that the tests import runs in this very process and can, if it is
written against this guard, still defeat it (or write on the channel itself). Tests that must
not trust the code under test run it in a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import envlab_pytest_guard as guard

sys.path.pop(0)
_EXIT = os._exit  # kept before any code under test can replace it


def main() -> int:
    try:
        import pytest
    except ImportError:
        print(
            "envlab: the verifier runs pytest, which is not installed in envlab's Python "
            f"({sys.executable}); reinstall envlab (pytest is one of its dependencies)",
            file=sys.stderr,
        )
        guard.report("missing pytest")
        return 4
    sys.argv[0] = "pytest"
    # this pytest is envlab's own: the plugins installed next to it (envlab's dev tools, the
    # user's) are not the task's, and would change how its tests run (and slow each grade by
    # scanning every installed package); a plugin the tests need is named with -p
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return int(pytest.main(sys.argv[1:], plugins=[guard]))


if __name__ == "__main__":
    status = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    _EXIT(status)
