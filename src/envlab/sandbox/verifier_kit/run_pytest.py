"""``pytest`` as the verifier runs it: ``python3 -P run_pytest.py ARGS`` (copied into the sandbox).

It registers a plugin that reports the start and the end of the test session on the pipe
``verifier_run.py`` reads, so that a session cut short (``os._exit(0)`` at import in the code
under test, a kill) is known to have never finished, whatever exit code it left behind; and it
ends the process itself once the session is over, so that no ``atexit`` handler the code under
test registered can change the exit code or the files pytest wrote.

What it cannot do: code that the tests import runs in this very process and can, if it targets
this guard, patch pytest or write on the pipe itself. Tests that must not trust the code under
test run it in a subprocess.
"""

from __future__ import annotations

import contextlib
import os
import sys

_FD = os.environ.pop("ENVLAB_REPORT_FD", None)
_EXIT = os._exit  # kept before any code under test can replace it


def _report(line: str) -> None:
    if _FD is None or not _FD.isdigit():
        return
    with contextlib.suppress(OSError):
        os.write(int(_FD), (line + "\n").encode())


def _mark(kind: str, text: str = "") -> None:
    _report(f"{kind} {os.getpid()} {text}".rstrip())


class SessionGuard:
    def pytest_sessionstart(self, session: object) -> None:
        _mark("start")

    def pytest_sessionfinish(self, session: object, exitstatus: object) -> None:
        _mark("finish", str(int(exitstatus)))  # type: ignore[call-overload]


def main() -> int:
    try:
        import pytest
    except ImportError:
        print(
            "envlab: the verifier runs pytest, which is not installed in envlab's Python "
            f"({sys.executable}); reinstall envlab (pytest is one of its dependencies)",
            file=sys.stderr,
        )
        _mark_missing("pytest")
        return 4
    sys.argv[0] = "pytest"
    # this pytest is envlab's own: the plugins installed next to it (envlab's dev tools, the
    # user's) are not the task's, and would change how its tests run (and slow each grade by
    # scanning every installed package); a plugin the tests need is named with -p
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return int(pytest.main(sys.argv[1:], plugins=[SessionGuard()]))


def _mark_missing(tool: str) -> None:
    _report(f"missing {tool}")


if __name__ == "__main__":
    status = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    _EXIT(status)
