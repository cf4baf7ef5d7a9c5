"""Running the server: ``serve`` (blocking, for the CLI) and ``ServerThread`` (in-process, a
uvicorn server on its own event loop in a thread, for tests and notebooks)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from envlab.core import ConfigError, InfraError

REQUEST_TIMEOUT_S = 30.0
"""How long one HTTP request may take to arrive, headers and body (``serve.protocol``)."""

if TYPE_CHECKING:
    from envlab.core import EnvSpec, Limits
    from envlab.serve.sessions import SessionManager


def require_serve() -> None:
    """A ``ConfigError`` saying how to install the extra if FastAPI or uvicorn is missing."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"envlab serve needs FastAPI and uvicorn ({e}): pip install 'envlab[serve]'"
        ) from None


def _uvicorn_config(
    app: Any, host: str, port: int, log_level: str, request_timeout_s: float
) -> Any:
    import uvicorn

    from envlab.serve.protocol import bounded_protocol

    if request_timeout_s <= 0:
        raise ConfigError(f"--request-timeout must be > 0 seconds, got {request_timeout_s}")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=bounded_protocol(request_timeout_s),  # a request must arrive in time
        h11_max_incomplete_event_size=64 * 1024,  # headers larger than this: 400
        access_log=False,
        ws="websockets-sansio",
        ws_max_size=64 * 1024 * 1024,
        lifespan="on",
        timeout_graceful_shutdown=10,
    )


def serve(
    spec: EnvSpec,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 64,
    idle_timeout: float = 600.0,
    limits: Limits | None = None,
    log_level: str = "warning",
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> None:
    """Serve ``spec`` until interrupted; a shutdown (Ctrl-C, SIGTERM) closes every episode.
    ``request_timeout_s``: how long one HTTP request may take to arrive (headers and body)."""
    require_serve()
    import uvicorn

    from envlab.serve.app import create_app

    app = create_app(spec, max_sessions=max_sessions, idle_timeout=idle_timeout, limits=limits)
    uvicorn.Server(_uvicorn_config(app, host, port, log_level, request_timeout_s)).run()


class ServerThread:
    """``envlab serve`` in this process: ``with ServerThread(spec) as srv: srv.url ...``.

    ``port=0`` picks a free port (``srv.port``, ``srv.url`` = ``http://HOST:PORT``,
    ``srv.ws_url``). ``srv.sessions`` is the server's ``SessionManager`` (read its counts:
    ``len(srv.sessions.sessions)``, ``srv.sessions.live_episodes``). ``stop()`` shuts the server
    down as a signal would: every episode is closed."""

    def __init__(
        self,
        spec: EnvSpec,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_sessions: int = 64,
        idle_timeout: float = 600.0,
        limits: Limits | None = None,
        log_level: str = "warning",
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        require_serve()
        import uvicorn

        from envlab.serve.app import create_app

        self.app = create_app(
            spec, max_sessions=max_sessions, idle_timeout=idle_timeout, limits=limits
        )
        self.sessions: SessionManager = self.app.state.sessions
        self.host = host
        self._server = uvicorn.Server(
            _uvicorn_config(self.app, host, port, log_level, request_timeout_s)
        )
        self._server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._run, name="envlab-serve", daemon=True)
        self._error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = port

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported by start()
            self._error = e

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._server.serve()

    def start(self, timeout: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise InfraError(f"envlab serve did not start: {self._error!r}")
            if time.monotonic() > deadline:
                raise InfraError(f"envlab serve did not start in {timeout}s")
            time.sleep(0.01)
        sock = self._server.servers[0].sockets[0]
        self.port = sock.getsockname()[1]
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run ``coro`` on the server's event loop (e.g. ``srv.sessions.reap_idle()``)."""
        assert self.loop is not None, "start() the server first"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/ws"

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
