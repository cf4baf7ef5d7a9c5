"""``pytest`` as the verifier runs it: ``python3 -P run_pytest.py ARGS`` (copied into the sandbox).

It registers a plugin that marks the start and the end of the test session in the directory
``verifier_run.py`` reads, so that a session cut short (``os._exit(0)`` at import in the code
under test, a kill) is known to have never finished, whatever exit code it left behind.
"""

from __future__ import annotations

import os
import sys

_DIR = os.environ.pop("ENVLAB_PYTEST_SESSIONS", None)


def _mark(kind: str, text: str = "") -> None:
    if _DIR is None:
        return
    try:
        with open(os.path.join(_DIR, f"{kind}-{os.getpid()}"), "w") as f:
            f.write(text)
    except OSError:
        pass


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
    return int(pytest.main(sys.argv[1:], plugins=[SessionGuard()]))


def _mark_missing(tool: str) -> None:
    if _DIR is not None:
        try:
            with open(os.path.join(_DIR, "missing-tools"), "a") as f:
                f.write(tool + "\n")
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
