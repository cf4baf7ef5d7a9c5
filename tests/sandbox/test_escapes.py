"""Real escape attempts from inside a sandbox; each must be contained.

Network, secrets outside the workspace, writes outside /app, fork and memory bombs, an
infinite loop, a gigabyte of output. Grading escapes (planted conftest.py, reward files, ...)
are in tests/envs/taskfolder/test_grading_escapes.py.
"""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from envlab.sandbox import BubblewrapSandbox, Limits, MiB, create_sandbox
from envlab.sandbox.uids import processes_of
from tests.sandbox.conftest import SMALL, requires_bwrap, requires_root

pytestmark = requires_bwrap


class _Handler(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Handler.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host secret page")

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def http_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.hits = []
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


async def test_cannot_reach_a_server_on_host_loopback(
    box: BubblewrapSandbox, http_server: int
) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{http_server}/sanity", timeout=5) as r:
        assert r.read() == b"host secret page"  # the server works, from the host
    script = f"""
import socket, urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:{http_server}/from-sandbox", timeout=3).read())
except Exception as e:
    print("refused:", type(e).__name__)
s = socket.socket()
s.settimeout(3)
print("connect:", s.connect_ex(("127.0.0.1", {http_server})))
"""
    res = await box.exec(["python3", "-c", script], timeout=15)
    assert "host secret page" not in res.stdout
    assert "refused: URLError" in res.stdout and "connect: 0" not in res.stdout
    tcp = await box.exec(f"echo x > /dev/tcp/127.0.0.1/{http_server}", timeout=10)
    assert tcp.exit_code != 0
    ifaces = await box.exec("cat /proc/net/dev")
    assert [ln.split(":")[0].strip() for ln in ifaces.stdout.splitlines()[2:]] == ["lo"]
    assert _Handler.hits == ["/sanity"], "no request from the sandbox reached the host"


async def test_cannot_read_a_secret_outside_the_workspace(
    box: BubblewrapSandbox, tmp_path: Path
) -> None:
    token = secrets.token_hex(16)
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text(token)
    os.chmod(secret_dir / "key.txt", 0o644)  # readable by anyone on the host
    paths = [str(secret_dir / "key.txt")]
    etc_secret = None
    if os.geteuid() == 0:  # a new file in the host's /etc is not on the sandbox's allow-list
        etc_secret = Path(f"/etc/envlab-test-secret-{token[:8]}")
        etc_secret.write_text(token)
        paths.append(str(etc_secret))
    try:
        for p in paths:
            res = await box.exec(["cat", p])
            assert res.exit_code != 0 and token not in res.stdout
        found = await box.exec(
            f"grep -rs {token} /etc /tmp /root /home /work /app /run /opt /srv /var 2>/dev/null;"
            "ls /etc/shadow /etc/ssh /root/.ssh 2>&1",
            # the interpreter's and the checkout's trees are readable (3.7 GB here: 6-22 s of
            # grep alone); 30 s was reached beside another xdist worker on a busy 2-core machine
            timeout=180,
        )
        assert token not in found.stdout
        assert "No such file" in found.stdout
    finally:
        if etc_secret is not None:
            etc_secret.unlink()


async def test_cannot_write_outside_the_workspace(box: BubblewrapSandbox, tmp_path: Path) -> None:
    name = f"envlab-escape-{secrets.token_hex(4)}"
    targets = ["/", "/usr", "/usr/bin", "/etc", "/root", "/opt", str(tmp_path), "/dev/shm"]
    script = "; ".join(
        f"echo x > {t.rstrip('/')}/{name} 2>/dev/null && echo WROTE {t}" for t in targets
    )
    res = await box.exec(script)
    assert "WROTE" not in res.stdout.replace("WROTE /dev/shm", ""), res.stdout
    for t in targets:
        assert not Path(t, name).exists(), f"{t}/{name} appeared on the host"
    # the sandbox's /tmp is its own: nothing lands in the host's /tmp
    await box.exec(f"echo x > /tmp/{name}")
    assert not Path("/tmp", name).exists()
    assert (await box.exec("echo ok > /app/inside && cat /app/inside")).stdout == "ok\n"


@requires_root
async def test_fork_bomb_is_bounded_and_the_host_unharmed() -> None:
    limits = SMALL.model_copy(update={"max_processes": 32})
    async with await create_sandbox(limits=limits) as box:
        assert isinstance(box, BubblewrapSandbox)
        script = "bomb() { bomb | bomb & }; bomb; sleep 10"
        bomb = asyncio.create_task(box.exec(script, timeout=3))
        peak = 0
        while not bomb.done():
            peak = max(peak, len(processes_of(box.uid)))
            host = subprocess.run(["true"], timeout=5)  # the host can still start processes
            assert host.returncode == 0
            await asyncio.sleep(0.05)
        res = await bomb
        assert res.timed_out
        assert 16 <= peak <= 32 + 2, f"{peak} processes: the bomb ran, RLIMIT_NPROC stopped it"
        await box.kill_all()
        assert processes_of(box.uid) == []


async def test_memory_bomb_is_bounded() -> None:
    limits = SMALL.model_copy(update={"address_space_bytes": 512 * MiB})
    async with await create_sandbox(limits=limits) as box:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        res = await box.exec(
            ["python3", "-c", "x = []\nwhile True: x.append(b'y' * (50 << 20))"], timeout=20
        )
        assert not res.timed_out and res.exit_code != 0
        assert "MemoryError" in res.stderr
        after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        assert after - before < 600 * 1024  # KiB: no child grew past the limit


async def test_infinite_loop_is_killed_at_the_timeout(box: BubblewrapSandbox) -> None:
    res = await box.exec("while :; do :; done", timeout=1)
    assert res.timed_out and res.exit_code == 137
    assert res.duration_s >= 0.9, "not killed before its time (a busy host only makes it later)"
    if os.geteuid() == 0:
        assert processes_of(box.uid) == []


async def test_a_gigabyte_of_output_is_truncated_in_bounded_memory() -> None:
    limits = Limits(output_bytes=1 * MiB, timeout_s=60)
    async with await create_sandbox(limits=limits) as box:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        res = await box.exec("head -c 1073741824 /dev/zero; echo; echo TAIL", timeout=120)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert res.exit_code == 0 and res.truncated and not res.timed_out
    assert len(res.stdout) < 1 * MiB + 200 and res.stdout.endswith("TAIL\n")
    assert "1072693" in res.stdout  # the marker counts what was dropped (1 GiB - 1 MiB + 6)
    assert after - before < 100 * 1024, f"envlab grew by {(after - before) // 1024} MiB"
