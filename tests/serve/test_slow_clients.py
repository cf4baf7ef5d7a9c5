"""A client cannot hold ``envlab serve``'s sockets by sending a request slowly.

Measured: incomplete HTTP requests were kept open with no limit (900 sockets held). Each test
opens raw sockets to a real server on 127.0.0.1 and reads until the server closes them: a
blocking read, no polling; a server that never closed them would fail the read's own timeout.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from envlab.core import ConfigError
from envlab.serve.server import ServerThread
from tests.support.envs import EchoEnv

LIMIT_S = 0.5
GUARD_S = 30.0
"""How long a read waits before the test fails: far past the server's limit."""


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(EchoEnv(), request_timeout_s=LIMIT_S) as srv:
        yield srv


def _open(srv: ServerThread, payload: bytes) -> socket.socket:
    sock = socket.create_connection((srv.host, srv.port), timeout=GUARD_S)
    if payload:
        sock.sendall(payload)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes the connection; True when it did (EOF or reset)."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # connected, never a byte
        b"GET /health HTTP/1.1\r\nHost: x\r\n",  # headers never finished
        b"POST /reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n{",  # a body shorter than its length
    ],
    ids=["silent", "half-headers", "short-body"],
)
def test_an_incomplete_request_is_cut_off(server: ServerThread, payload: bytes) -> None:
    socks = [_open(server, payload) for _ in range(20)]
    try:
        assert all(_closed_by_server(s) for s in socks)
    finally:
        for s in socks:
            s.close()
    # the server still answers whole requests
    assert httpx.get(f"{server.url}/health", timeout=GUARD_S).status_code == 200


def test_trickled_bytes_do_not_move_the_deadline(server: ServerThread) -> None:
    """One header byte at a time, each sent as soon as the last was taken: the deadline was
    fixed when the request began, so the server closes the connection mid-header."""
    sock = _open(server, b"GET /health HTTP/1.1\r\n")
    sock.settimeout(LIMIT_S / 5)
    closed = False
    try:
        for i in range(int(GUARD_S / (LIMIT_S / 5))):
            try:
                sock.sendall(b"X-Pad-%d: y\r\n" % i)
                if sock.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue  # the server said nothing in this slice: send the next byte
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
    finally:
        sock.close()
    assert closed


def test_whole_requests_and_kept_alive_connections_still_work(server: ServerThread) -> None:
    with httpx.Client(base_url=server.url, timeout=GUARD_S) as client:
        for _ in range(3):  # one kept-alive connection, request after request
            assert client.get("/health").status_code == 200
        r = client.post("/reset", json={})
        assert r.status_code == 200, r.text


def test_a_bad_request_timeout_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="--request-timeout"):
        ServerThread(EchoEnv(), request_timeout_s=0)
