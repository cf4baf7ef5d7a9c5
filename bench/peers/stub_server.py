"""A fast stub OpenAI-compatible server for ``bench/peers.py`` (stdlib only, one process).

``POST .../chat/completions`` answers a fixed-shape chat completion whose text is the right
answer to the last user message (``The answer is N.``), looked up in the task file the bench
wrote; a prompt it does not know gets ``I do not know.`` and counts as a miss. ``GET /stats``
returns counters (requests, misses, TCP connections accepted, paths seen); ``GET .../models``
lists the one model. HTTP/1.1 with keep-alive, bodies by Content-Length.

    python bench/peers/stub_server.py --tasks tasks.json   # prints "PORT <n>" when ready
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter
from typing import Any

MODEL = "stub"


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.misses = 0
        self.connections = 0
        self.paths: Counter[str] = Counter()

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "requests": self.requests,
                "misses": self.misses,
                "connections": self.connections,
                "paths": dict(self.paths),
            }
        ).encode()


def answer_text(answer: Any) -> str:
    value = float(answer)
    number = str(int(value)) if value.is_integer() else repr(round(value, 6))
    return f"The answer is {number}."


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class Handler(asyncio.Protocol):
    def __init__(self, answers: dict[str, str], stats: Stats) -> None:
        self.answers, self.stats = answers, stats
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.stats.connections += 1

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = [*lines[0].split(" "), "", ""][:3]
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            close = headers.get("connection", "").lower() == "close"
            self.respond(method, path, body, close)
            if close:
                return

    def respond(self, method: str, path: str, body: bytes, close: bool) -> None:
        status, payload = 200, b""
        route = path.split("?")[0]
        if method == "GET" and route == "/stats":
            payload = self.stats.to_json()
        elif method == "GET" and route.endswith("/models"):
            payload = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            payload = payload.encode()
        elif method == "POST" and route.endswith("/chat/completions"):
            self.stats.requests += 1
            self.stats.paths[route] += 1
            payload = self.completion(json.loads(body or b"{}"))
        else:
            self.stats.paths[f"{method} {route}"] += 1
            status, payload = 404, b'{"error": {"message": "not found"}}'
        reason = "OK" if status == 200 else "Not Found"
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        assert self.transport is not None
        self.transport.write(head.encode() + payload)
        if close:
            self.transport.close()

    def completion(self, body: dict[str, Any]) -> bytes:
        text = self.answers.get(last_user_text(body))
        if text is None:
            self.stats.misses += 1
            text = "I do not know."
        return json.dumps(
            {
                "id": f"chatcmpl-{self.stats.requests}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56},
            }
        ).encode()


async def serve(tasks_file: str, host: str, port: int) -> None:
    with open(tasks_file) as f:
        tasks = json.load(f)["tasks"]
    answers = {t["prompt"]: answer_text(t["answer"]) for t in tasks}
    stats = Stats()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Handler(answers, stats), host, port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(a.tasks, a.host, a.port))


if __name__ == "__main__":
    main()
