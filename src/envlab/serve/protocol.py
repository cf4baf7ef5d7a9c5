"""uvicorn's HTTP/1.1 protocol with a deadline on each request's arrival.

uvicorn (0.55) bounds the idle time between requests of a kept-alive connection, but not the
time a request takes to arrive: a client that sends half its headers, or a body shorter than
its ``Content-Length``, holds its socket (and, for a body, the handler waiting on it) for as
long as it likes, and any byte it trickles in resets the keep-alive timer. ``envlab serve``
measured 900 sockets held that way.

``BoundedH11Protocol`` gives each request ``request_timeout_s`` from its first byte to its last
(headers and body): the deadline is fixed when the request starts and data arriving does not
move it. Past it the connection is closed; a handler waiting for the body sees the client
disconnect. A WebSocket upgrade ends the HTTP request (the session's own idle limit applies
from then on), as does the request's last byte.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class BoundedH11Protocol(H11Protocol):
    """``H11Protocol`` with a fixed deadline per request (``request_timeout_s``)."""

    request_timeout_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arrival: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_arrival()  # a connection that never sends a whole request is closed too

    def data_received(self, data: bytes) -> None:
        if self._arrival is None and self.conn.their_state is h11.IDLE:
            self._start_arrival()  # the next request on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.SEND_BODY and self.conn.their_state is not h11.IDLE:
            self._stop_arrival()  # the whole request is in (DONE), or the connection ended

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._stop_arrival()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_arrival()
        super().connection_lost(exc)

    def _start_arrival(self) -> None:
        self._stop_arrival()
        self._arrival = self.loop.call_later(self.request_timeout_s, self._too_slow)

    def _stop_arrival(self) -> None:
        if self._arrival is not None:
            self._arrival.cancel()
            self._arrival = None

    def _too_slow(self) -> None:
        self._arrival = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.logger.info(
                "closed a connection whose request took longer than %gs to arrive",
                self.request_timeout_s,
            )
            self.transport.close()


def bounded_protocol(request_timeout_s: float) -> type[BoundedH11Protocol]:
    """``BoundedH11Protocol`` with ``request_timeout_s`` (uvicorn takes a class, not options)."""
    return type(
        "BoundedH11Protocol", (BoundedH11Protocol,), {"request_timeout_s": request_timeout_s}
    )
