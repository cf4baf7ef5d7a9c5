"""``KeepAliveTransport``: an httpx transport for one model endpoint, many requests in flight.

httpcore's connection pool rescans every connection on each request and each response
(``has_expired`` polls each idle socket, and a nested count makes it quadratic): with 32
requests in flight that was most of the client's CPU. This pool keeps idle connections on a
free list instead: a request takes the most recently used one (checking only that one), or
opens a new one; a response, once read, hands its connection back. The protocol itself is
httpcore's (``AsyncHTTPConnection``, HTTP/1.1), and errors are httpx's, as with the default
transport. ``max_connections`` bounds the open connections (a request waits for a free one up
to the pool timeout, then ``httpx.PoolTimeout``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpcore
import httpx


class _FreeListPool:
    """httpcore's pool interface (``handle_async_request``, ``aclose``) over a free list."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None,
        keepalive_expiry: float | None,
        max_connections: int | None,
    ) -> None:
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._idle: list[httpcore.AsyncHTTPConnection] = []
        self._open: set[httpcore.AsyncHTTPConnection] = set()
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._closed = False

    @property
    def connections(self) -> int:
        """Connections open now (idle or busy)."""
        return len(self._open)

    async def _take(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        while self._idle:
            conn = self._idle.pop()  # the most recently used: least likely dropped by the server
            if conn.is_idle() and not conn.has_expired() and conn.can_handle_request(origin):
                return conn
            self._open.discard(conn)
            await conn.aclose()
        conn = httpcore.AsyncHTTPConnection(
            origin=origin, ssl_context=self._ssl_context, keepalive_expiry=self._keepalive_expiry
        )
        self._open.add(conn)
        return conn

    async def _give_back(self, conn: httpcore.AsyncHTTPConnection) -> None:
        if self._slots is not None:
            self._slots.release()
        if not self._closed and conn.is_idle():
            self._idle.append(conn)
        else:
            self._open.discard(conn)
            await conn.aclose()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        if self._closed:
            raise RuntimeError("the HTTP client was closed; make a new one")
        if self._slots is not None:
            timeout = request.extensions.get("timeout", {}).get("pool")
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout)
            except TimeoutError:
                raise httpcore.PoolTimeout(f"no free connection within {timeout}s") from None
        while True:
            conn = await self._take(request.url.origin)
            try:
                response = await conn.handle_async_request(request)
            except httpcore.ConnectionNotAvailable:
                self._open.discard(conn)  # busy or closing after all: take another
                continue
            except BaseException:
                await self._give_back(conn)
                raise
            stream = _GiveBackStream(response.stream, self, conn)  # type: ignore[arg-type]
            return httpcore.Response(
                status=response.status,
                headers=response.headers,
                content=stream,
                extensions=response.extensions,
            )

    async def aclose(self) -> None:
        self._closed = True
        conns, self._idle = list(self._open), []
        self._open.clear()
        for conn in conns:
            await conn.aclose()

    async def __aenter__(self) -> _FreeListPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


class _GiveBackStream:
    """A response body that hands its connection back to the pool when closed."""

    def __init__(self, stream: Any, pool: _FreeListPool, conn: httpcore.AsyncHTTPConnection):
        self._stream, self._pool, self._conn = stream, pool, conn
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            if not self._done:
                self._done = True
                await self._pool._give_back(self._conn)


class KeepAliveTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` over a free-list pool of kept-alive HTTP/1.1 connections."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        max_connections: int | None = None,
        keepalive_expiry: float | None = 30.0,
    ) -> None:
        # no super().__init__(): it would build httpcore's pool, which this one replaces
        context = httpx.create_ssl_context(verify=verify)
        self._pool = _FreeListPool(context, keepalive_expiry, max_connections)  # type: ignore[assignment]

    @property
    def connections(self) -> int:
        """Connections open now."""
        return self._pool.connections  # type: ignore[attr-defined,no-any-return]
