"""envlab's pytest guard in the verifier (``PYTEST_PLUGINS`` in an image; registered by
``run_pytest.py`` in the host mode). Python 3.6+, standard library only.

It reports the start and the end of every test session on envlab's events channel (a FIFO the
host reads while the tests run, bind-mounted so that it cannot be replaced: what was written
cannot be erased), so that a session the code under test cut short (``os._exit`` at import, a
kill) is known to have never finished, whatever exit code it left behind.
"""

import os

_EVENTS = os.environ.get("ENVLAB_EVENTS", "/logs/.envlab-events")


def report(line):
    """Write one line on the events channel (never blocks; a missing channel is ignored)."""
    try:
        fd = os.open(_EVENTS, os.O_WRONLY | os.O_NONBLOCK | os.O_APPEND)
    except OSError:
        return
    try:
        os.write(fd, (line + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def pytest_sessionstart(session):
    report(f"start {os.getpid()}")


def pytest_sessionfinish(session, exitstatus):
    report(f"finish {os.getpid()} {int(exitstatus)}")
