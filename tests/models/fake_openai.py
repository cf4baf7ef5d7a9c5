"""A scripted OpenAI-compatible server on 127.0.0.1 (real HTTP, stdlib only), for tests.

Each request takes the next scripted answer: a chat completion, an HTTP error, or a dropped
connection. Requests are recorded. An exhausted script answers HTTP 599, so a test that sends
more requests than it planned fails loudly; with ``respond``, the request itself decides the
answer instead (``respond(body) -> Scripted``), for as many requests as come. ``connections``
is the set of TCP connections (client address and port) the requests came on.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    close_after: bool = False
    """Answer, then close the connection without saying so (as an idle keep-alive times out)."""


def completion(
    content: str | None = "",
    *,
    tool_calls: list[tuple[str, str]] | None = None,
    prompt_ids: list[int] | None = None,
    token_ids: list[int] | None = None,
    logprobs: list[float] | None = None,
    finish_reason: str | None = None,
) -> Scripted:
    """A 200 chat completion; ``tool_calls`` are ``(name, arguments_text)`` pairs."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(tool_calls)
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
    }
    if token_ids is not None:
        choice["token_ids"] = token_ids
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": "t", "logprob": lp} for lp in logprobs]}
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake",
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids or []),
            "completion_tokens": len(token_ids or []) or 3,
            "total_tokens": 0,
        },
    }
    if prompt_ids is not None:
        body["prompt_token_ids"] = prompt_ids
    return Scripted(body=body)


def error(status: int, message: str = "error", headers: dict[str, str] | None = None) -> Scripted:
    return Scripted(status=status, body={"error": {"message": message}}, headers=headers or {})


def dropped() -> Scripted:
    """Read the request, then close the connection without an answer."""
    return Scripted(drop=True)


class FakeOpenAI:
    """``with FakeOpenAI() as fake: fake.push(...); fake.base_url``."""

    def __init__(self, respond: Callable[[dict[str, Any]], Scripted] | None = None) -> None:
        self.script: deque[Scripted] = deque()
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.connections: set[tuple[str, int]] = set()
        self.closed_after = threading.Event()
        """Set once a ``close_after`` answer's connection is shut."""
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, item: Scripted) -> None:
                data = json.dumps(item.body).encode()
                self.send_response(item.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in item.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(Scripted(body={"object": "list", "data": [{"id": "fake"}]}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                body = json.loads(raw or b"{}")
                with fake._lock:
                    fake.requests.append(body)
                    fake.connections.add(self.client_address[:2])
                    item = fake.script.popleft() if fake.script else None
                if item is None:
                    item = fake.respond(body) if fake.respond else error(599, "script ended")
                if item.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._send(item)
                if item.close_after:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    fake.closed_after.set()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *items: Scripted) -> None:
        with self._lock:
            self.script.extend(items)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
