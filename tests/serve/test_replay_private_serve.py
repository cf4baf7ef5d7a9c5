"""A replay served by ``envlab serve`` (a real process on 127.0.0.1) shows an OpenEnv client
nothing of the reference session: not in ``state()`` (during and after the episode), not in a
step's observation or ``info``, not in the grade's record of the last frame."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from envlab.envs.replay import build_sim
from envlab.serve import wire
from tests.conftest import subprocess_env
from tests.envs.test_replay_private import (
    OTHER,
    PLACEHOLDER_READ,
    PLACEHOLDER_WRITE,
    REF_ID,
    REFERENCE,
    leaks,
)
from tests.serve.test_serve_cmd import _free_port, _wait_healthy


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``envlab serve`` on the rent logs with fuzzy matching; its ws URL."""
    logs = tmp_path / "rent.jsonl"
    logs.write_text("".join(json.dumps(s) + "\n" for s in (REFERENCE, OTHER)))
    build_sim(logs, tmp_path / "sim")
    port = _free_port()
    cmd = [sys.executable, "-m", "envlab.cli.main", "serve", str(tmp_path / "sim"),
           "--port", str(port), "-e", "match=fuzzy", "-e", "fuzzy_threshold=0.7"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield f"ws://127.0.0.1:{port}/ws"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _call(name: str, args: dict[str, Any], cid: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": cid, "name": name, "arguments": args}]}


def test_served_state_and_frames_name_no_reference(served: str) -> None:
    frames: list[dict[str, Any]] = []
    with connect(served) as ws:

        def send(kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
            ws.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
            frame: dict[str, Any] = json.loads(ws.recv(timeout=30))
            assert frame["type"] != "error", frame
            frames.append(frame)
            return frame

        send("reset", {"task_id": "pay-rent", "seed": 0})
        state = send("state")["data"]
        assert state["task_id"] == "pay-rent" and "reference" not in state["env"]
        send("step", _call("get_balance", PLACEHOLDER_READ, "r"))
        send("step", {"text": "Shall I pay the 800 of rent now (yes/no)?"})
        step = send("step", _call("transfer", PLACEHOLDER_WRITE, "w"))
        assert step["data"]["observation"]["info"]["replay"] == [
            {"tool": "transfer", "call_id": "w", "unanswerable": False}
        ]
        send("state")
        last = send("step", {"text": "Paid."})
        assert last["data"]["done"] is True
        grade = last["data"]["metadata"]["reward"]
        assert grade["total"] == 0.0 and grade["gated_by"] == "no_unlogged_write"
        after = send("state")["data"]
        assert after["done"] is True and after["env"]["calls"] == 2
    assert leaks(frames) == [], [f for f in frames if leaks(f)]
    assert REF_ID not in json.dumps(frames)


def test_served_http_state_names_no_reference(served: str) -> None:
    """The HTTP routes (``/reset``, ``/step``, ``/state``) are the same sessions."""
    base = served.removeprefix("ws://").removesuffix("/ws")
    with httpx.Client(base_url=f"http://{base}", timeout=30) as http:
        reset = http.post("/reset", json={"task_id": "pay-rent", "seed": 0})
        assert reset.status_code == 200, reset.text
        sid = reset.json()["session_id"]
        headers = {wire.SESSION_HEADER: sid}
        step = http.post(
            "/step",
            json={"action": _call("transfer", PLACEHOLDER_WRITE, "w"), "session_id": sid},
            headers=headers,
        )
        assert step.status_code == 200, step.text
        state = http.get("/state", headers=headers)
        assert state.status_code == 200, state.text
        assert leaks([reset.json(), step.json(), state.json()]) == []
