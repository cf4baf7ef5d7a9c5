"""The server's lifecycle: a disconnect frees the episode's sandbox at once, a shutdown closes
every episode (real uvicorn, real bubblewrap sandboxes)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from websockets.sync.client import ClientConnection, connect

from envlab.envs.taskfolder import TerminalEnv
from envlab.serve import wire
from envlab.serve.server import ServerThread
from tests.envs.taskfolder.conftest import make_task
from tests.sandbox.conftest import requires_bwrap
from tests.serve.conftest import Frames, frames, serving, wait_for
from tests.serve.specs import CLOSED, Recorded

MARK = "987654"  # a sleep only our sandboxed process runs


def _sleepers() -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[:2] == [b"sleep", MARK.encode()]:
            pids.append(int(name))
    return pids


def _drop(ws: ClientConnection) -> None:
    """Go away without a close frame, as a crashed client does."""
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


@requires_bwrap
def test_a_client_that_disconnects_between_steps_frees_its_sandbox(tmp_path: Path) -> None:
    with serving(TerminalEnv(make_task(tmp_path))) as srv, connect(srv.ws_url) as ws:
        f = Frames(ws)
        assert f.send(wire.reset_frame())["type"] == "observation"
        run = {"id": "c", "name": "run", "arguments": {"command": "echo up > up.txt; cat up.txt"}}
        out = f.send({"type": "step", "data": {"tool_calls": [run]}})["data"]
        assert "up" in out["observation"]["tool_results"][0]["content"]
        (session,) = srv.sessions.sessions.values()
        box = session.env.unwrapped.box  # type: ignore[union-attr]
        workdir = box.host_workdir
        assert (workdir / "up.txt").exists() and not box.closed
        _drop(ws)
        wait_for(lambda: box.closed, "the sandbox closed")
        wait_for(lambda: not workdir.exists(), "the workspace deleted")
        wait_for(lambda: not srv.sessions.sessions, "the session gone")
        assert srv.sessions.live_episodes == 0


@requires_bwrap
def test_a_client_that_disconnects_mid_step_frees_its_sandbox_at_once(tmp_path: Path) -> None:
    with serving(TerminalEnv(make_task(tmp_path))) as srv, connect(srv.ws_url) as ws:
        f = Frames(ws)
        f.send(wire.reset_frame())
        (session,) = srv.sessions.sessions.values()
        box = session.env.unwrapped.box  # type: ignore[union-attr]
        run = {"name": "run", "arguments": {"command": f"sleep {MARK}", "timeout_sec": 3000}}
        ws.send(json.dumps({"type": "step", "data": {"tool_calls": [run]}}))
        wait_for(lambda: bool(_sleepers()), "the long command running in the sandbox")
        _drop(ws)  # while the step runs: the server must not wait for the command to finish
        wait_for(lambda: box.closed, "the sandbox closed")
        wait_for(lambda: not _sleepers(), "the sandbox's processes killed")
        wait_for(lambda: not box.host_workdir.exists(), "the workspace deleted")
        wait_for(lambda: not srv.sessions.sessions, "the session gone")
        assert srv.sessions.live_episodes == 0


def test_a_shutdown_closes_every_episode() -> None:
    CLOSED.clear()
    srv = ServerThread(Recorded()).start()
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(connect(srv.ws_url)) for _ in range(3)]
        for i, ws in enumerate(clients):
            Frames(ws).send(wire.reset_frame(task_id=f"echo-{i}"))
        assert srv.sessions.live_episodes == 3
        srv.stop()
        assert sorted(CLOSED) == ["echo-0", "echo-1", "echo-2"]
        assert srv.sessions.live_episodes == 0 and not srv.sessions.sessions


def test_a_clean_close_frame_closes_the_episode() -> None:
    CLOSED.clear()
    with serving(Recorded()) as srv:
        with frames(srv) as f:
            f.send(wire.reset_frame(task_id="echo-2"))
            f.ws.send('{"type": "close"}')
            wait_for(lambda: CLOSED == ["echo-2"], "the episode closed on the close frame")
        wait_for(lambda: not srv.sessions.sessions, "the session gone")
