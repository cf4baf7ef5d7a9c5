"""Servers for the serve tests: a real uvicorn on 127.0.0.1 (a free port) in a thread."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

from envlab.core import EnvSpec
from envlab.serve.server import ServerThread

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@contextmanager
def serving(spec: EnvSpec, **kwargs: Any) -> Iterator[ServerThread]:
    with ServerThread(spec, **kwargs) as srv:
        yield srv


class Frames:
    """A raw websockets client that sends and reads envlab/OpenEnv frames as dicts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    def send(self, frame: dict[str, Any] | str) -> dict[str, Any]:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))
        return self.recv()

    def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        return json.loads(self.ws.recv(timeout=timeout))


@contextmanager
def frames(srv: ServerThread) -> Iterator[Frames]:
    with connect(srv.ws_url) as ws:
        yield Frames(ws)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``cond`` until it holds (a server thread's cleanup runs on its own loop)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)
