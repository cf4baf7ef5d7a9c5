"""``envlab serve-model``: an OpenAI-compatible HTTP server for a local model (FastAPI).

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (tools, ``tool_choice``, sampling,
``logprobs``; no streaming), ``GET /health``. Every route is stateless: a request carries the
whole conversation. Responses add the token ids (``prompt_token_ids``, ``choices[0].token_ids``).

Requests take turns at the engine (``Turnstile``, first come first served); the wait for a turn
is not the agent's time (``core.clock.not_agent_time("model queue")``): an in-process agent's
step and episode limits stop while it queues behind other episodes.

FastAPI is imported here, so import this module only to serve; without the extra
``envlab[local]`` importing it raises ``ConfigError`` saying how to install it. The in-process agent
(``--agent smollm2``) talks to the same app through ``httpx.ASGITransport``
with the same client as for a remote server, so local and remote models share one code path.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import weakref
from typing import Any, Protocol

import anyio.to_thread

from envlab.core import ConfigError, not_agent_time
from envlab.models.local import local_extra_error

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
except ImportError as _e:  # the extra envlab[local] is not installed
    raise local_extra_error("serving a model (envlab.models.server)", f"fastapi: {_e}") from _e
from envlab.models.turns import Turn, Turnstile
from envlab.models.wire import (
    ChatRequest,
    ChatResponse,
    ErrorBody,
    ErrorResponse,
    ModelCard,
    ModelList,
)


class ChatEngine(Protocol):
    model_id: str

    @property
    def weights_hash(self) -> str | None: ...

    def chat(self, request: ChatRequest, cancel: threading.Event | None = None) -> ChatResponse:
        """Blocking; raises ``ConfigError`` for a request it cannot serve."""
        ...


_turnstiles: weakref.WeakKeyDictionary[Any, Turnstile] = weakref.WeakKeyDictionary()
_turnstiles_lock = threading.Lock()


def engine_turnstile(engine: ChatEngine) -> Turnstile:
    """The one queue of ``engine``, shared by every app that serves it in this process."""
    with _turnstiles_lock:
        turns = _turnstiles.get(engine)
        if turns is None:
            turns = _turnstiles[engine] = Turnstile()
        return turns


class _Abandoned(Exception):
    """The request gave up before a worker thread took its turn."""


def _serve(
    engine: ChatEngine, body: ChatRequest, cancel: threading.Event, turn: Turn
) -> ChatResponse:
    """In the worker thread: generate, then hand the engine to the next request."""
    if not turn.claim():
        raise _Abandoned
    try:
        return engine.chat(body, cancel)
    finally:
        turn.finish()


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(message=message, type=kind, code=str(status)))
    return JSONResponse(body.model_dump(), status_code=status)


async def _watch_disconnect(request: Request, cancel: threading.Event) -> None:
    """Stop generating for a client that hung up (a step timeout, a killed run)."""
    while not await request.is_disconnected():
        await asyncio.sleep(0.25)
    cancel.set()


def create_app(engine: ChatEngine, *, served_name: str) -> FastAPI:
    """The app serving ``engine`` under the model name ``served_name``."""
    app = FastAPI(title="envlab serve-model", docs_url=None, redoc_url=None)
    started = int(time.time())
    turns = engine_turnstile(engine)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return _error(400, f"invalid request: {problems}")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "model": served_name}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = ModelCard(id=served_name, created=started, weights_hash=engine.weights_hash)
        return ModelList(data=[card]).model_dump()

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request) -> Any:
        if body.stream:
            return _error(
                400, "streaming is not supported by envlab serve-model; send stream=false"
            )
        if body.model and body.model != served_name:
            return _error(
                404,
                f"model {body.model!r} is not served here; this server serves {served_name!r}",
                "not_found_error",
            )
        cancel = threading.Event()
        watcher = asyncio.create_task(_watch_disconnect(request, cancel))
        turn: Turn | None = None
        try:
            async with not_agent_time("model queue"):
                turn = await turns.acquire()
            reply = await anyio.to_thread.run_sync(
                _serve, engine, body, cancel, turn, abandon_on_cancel=True
            )
        except ConfigError as e:
            return _error(400, str(e))
        except BaseException:
            cancel.set()  # cancelled (in-process timeout): let the generation stop early
            raise
        finally:
            watcher.cancel()
            if turn is not None:
                turn.abandon()  # passes the turn on only if no worker took it
        reply.model = served_name
        return reply.model_dump(mode="json")

    return app


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError as e:
        raise local_extra_error("serving a model over HTTP", f"uvicorn: {e}") from e
    return uvicorn


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class BackgroundServer:
    """uvicorn serving an app in a thread of this process (for tests and benchmarks).

    ``with BackgroundServer(app) as srv: srv.base_url`` is ``http://127.0.0.1:PORT/v1``.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int | None = None) -> None:
        uvicorn = _uvicorn()
        self.host, self.port = host, port or free_port(host)
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="envlab-serve", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the test server on {self.host}:{self.port} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        with contextlib.suppress(RuntimeError):
            self._thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(engine: ChatEngine, *, served_name: str, host: str, port: int) -> None:
    """Serve until interrupted (blocking)."""
    uvicorn = _uvicorn()
    uvicorn.run(create_app(engine, served_name=served_name), host=host, port=port)
