"""envlab's pytest guard in an image's verifier, loaded through ``PYTEST_PLUGINS``.

It records the start and the end of every test session in ``/opt/envlab/report/events``, so
that a session the code under test cut short (``os._exit`` at import, a kill) is known to have
never finished, whatever exit code it left behind. Python 3.6+, standard library only.
"""

import os

_EVENTS = "/opt/envlab/report/events"


def _mark(kind, extra=""):
    try:
        fd = os.open(_EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError:
        return
    try:
        os.write(fd, f"{kind} {os.getpid()} {extra}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def pytest_sessionstart(session):
    _mark("start")


def pytest_sessionfinish(session, exitstatus):
    _mark("finish", str(int(exitstatus)))
