"""``envlab serve`` as a process: OpenEnv's client plays on it; SIGTERM closes every episode."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from openenv.core import GenericEnvClient

from tests.conftest import subprocess_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("envlab serve never became healthy")


def test_envlab_serve_plays_and_closes_its_episodes_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "closed.txt"
    port = _free_port()
    cmd = [sys.executable, "-m", "envlab.cli.main", "serve", "tests.serve.specs:Logged",
           "--port", str(port), "--max-sessions", "4", "-e", f"close_log={log}",
           "--json"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        assert proc.stdout is not None
        details = json.loads(proc.stdout.readline())
        assert details["url"] == f"ws://127.0.0.1:{port}/ws" and details["max_sessions"] == 4
        with GenericEnvClient(base_url=url).sync() as c:
            c.reset(task_id="echo-1")
            assert c.step({"text": "ok"}).reward == 1.0
        open_client = GenericEnvClient(base_url=url).sync()
        open_client.connect()
        open_client.reset(task_id="echo-2")  # still open when the server is told to stop
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(log.read_text().split()) == ["echo-1", "echo-2"]


def test_envlab_serve_refuses_a_bad_option_clearly() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envlab.cli.main", "serve", "calc", "--max-sessions", "0"],
        env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "--max-sessions must be >= 1" in proc.stderr
