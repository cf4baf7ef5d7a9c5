"""``ModelHTTP``: the one HTTP client that every episode of a run shares for one model endpoint.

A run sends many small requests to one origin, dozens in flight. httpx's client and httpcore's
pool cost ~1.5 ms of CPU per request there (the pool rescans every connection per request and
per response; anyio cancel scopes and locks wrap each read and write), more than everything
else an episode does. So a plain ``http://`` or ``https://`` endpoint is spoken to directly:
kept-alive HTTP/1.1 connections (``h11``, which httpx itself uses underneath) on an asyncio
protocol, on a free list; a request takes the most recently used idle connection that is still
open (its socket has nothing to read: one the server closed would) or opens one.

- ``http://`` sets up no TLS at all; ``https://`` verifies certificates (``httpx``'s CA
  set-up, honouring ``SSL_CERT_FILE``/``SSL_CERT_DIR``), once per client;
- an endpoint behind a proxy from the environment (``HTTPS_PROXY``...) goes through
  ``httpx.AsyncHTTPTransport(proxy=...)``, and a given ``transport`` (``httpx.ASGITransport``
  for the in-process model) is used as it is;
- failures are httpx's exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
  ``RemoteProtocolError``, ``PoolTimeout``), so callers handle every transport alike.
"""

from __future__ import annotations

import asyncio
import json
import select
import ssl
import time
import urllib.request
from types import TracebackType
from typing import Any

import h11
import httpx

KEEPALIVE_S = 30.0
"""An idle connection older than this is closed instead of reused."""


class Reply:
    """A whole HTTP response: ``status_code``, ``headers`` (lower-case names), ``content``."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, the whole response read into memory."""

    def __init__(self) -> None:
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used = 0
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timeout: float | None = None
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            self._fail(httpx.ReadError(f"connection lost: {exc}"))
        else:
            self._fail(httpx.RemoteProtocolError("the server closed the connection mid-response"))

    def eof_received(self) -> bool | None:
        self._feed(b"")  # a response delimited by the connection's end ends here
        return None

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection is unusable
            self.close()
            return
        if self._timer is not None and self._timeout is not None:
            self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(self._timeout, self._timed_out)
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if self._waiter is None:
            return
        try:
            self.h11.receive_data(data)
            while True:
                event = self.h11.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Response):
                    self._status, self._headers = event.status_code, list(event.headers)
                elif isinstance(event, h11.Data):
                    self._chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    if not self._waiter.done():
                        self._waiter.set_result(None)
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    self._fail(httpx.RemoteProtocolError("the server closed the connection"))
                    return
        except h11.RemoteProtocolError as e:
            self._fail(httpx.RemoteProtocolError(f"bad HTTP response: {e}"))
            self.close()

    def _fail(self, error: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _timed_out(self) -> None:
        self._fail(httpx.ReadTimeout(f"no response within {self._timeout}s"))
        self.close()

    async def send(
        self, request: h11.Request, body: bytes, timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._status, self._headers, self._chunks = 0, [], []
        self._timeout = timeout
        self.used += 1
        try:
            out = self.h11.send(request) or b""
            if body:
                out += self.h11.send(h11.Data(data=body)) or b""
            out += self.h11.send(h11.EndOfMessage()) or b""
            self.transport.write(out)
            if timeout is not None:
                self._timer = loop.call_later(timeout, self._timed_out)
            await waiter
        except BaseException:
            self.close()  # cancelled or failed mid-request: the connection's state is unknown
            raise
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        response = (self._status, self._headers, b"".join(self._chunks))
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            self.idle_since = time.monotonic()
        else:
            self.close()
        return response

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def reusable(self) -> bool:
        """Open, and nothing to read: an idle socket that is readable was closed by the server
        (its end of file not yet seen by the event loop), or holds bytes nobody asked for."""
        if self.closed or self.transport is None:
            return False
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return True
        try:
            readable, _, _ = select.select([sock.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable


class _Pool:
    """Kept-alive connections to one origin, on a free list (most recently used first)."""

    def __init__(
        self,
        url: httpx.URL,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float | None,
        max_connections: int | None,
    ) -> None:
        self.host, self.port = url.host, url.port or (443 if url.scheme == "https" else 80)
        default = self.port == (443 if url.scheme == "https" else 80)
        self.host_header = (url.host if default else f"{url.host}:{self.port}").encode()
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.idle: list[_Connection] = []
        self.opened = 0
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None

    def _take(self) -> _Connection | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if now - conn.idle_since < KEEPALIVE_S and conn.reusable():
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        server_hostname = self.host if self.ssl_context is not None else None
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=server_hostname,
                ),
                self.connect_timeout,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout}s"
            ) from None
        except (OSError, ssl.SSLError) as e:
            raise httpx.ConnectError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        self.opened += 1
        return conn

    async def send(
        self, request: h11.Request, body: bytes, timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if self._slots is not None:
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout)
            except TimeoutError:
                raise httpx.PoolTimeout(f"no free connection within {timeout}s") from None
        try:
            conn = self._take() or await self._connect()
            response = await conn.send(request, body, timeout)
            if not conn.closed:
                self.idle.append(conn)
            return response
        finally:
            if self._slots is not None:
                self._slots.release()

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


def _proxy_for(url: httpx.URL) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``, ``NO_PROXY``), if any."""
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(url.host):
        return None
    return proxy


class ModelHTTP:
    """One pooled HTTP client for the endpoint at ``base_url``, shared by a run's episodes.

    ``request()`` sends a whole body and returns the whole response (``Reply``). ``timeout_s``
    bounds the wait for a response (per request: ``request(timeout_s=)``; the time between
    bytes of a response), ``connect_timeout_s`` opening a connection; ``max_connections``
    caps the pool (``None``: one connection per request in flight, kept for the next).
    Bound to the event loop that first uses it. ``transport`` (e.g. ``httpx.ASGITransport``)
    replaces the network.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float | None = 120.0,
        connect_timeout_s: float | None = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int | None = None,
    ) -> None:
        url = httpx.URL(base_url)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.closed = False
        self._auth = [(b"authorization", f"Bearer {api_key}".encode())] if api_key else []
        self._pool: _Pool | None = None
        self._transport = transport
        if transport is None and url.scheme in ("http", "https"):
            proxy = _proxy_for(url)
            secure = url.scheme == "https"
            if proxy is None:
                context = httpx.create_ssl_context() if secure else None
                self._pool = _Pool(url, context, connect_timeout_s, max_connections)
            else:
                limits = httpx.Limits(max_connections=max_connections)
                self._transport = httpx.AsyncHTTPTransport(
                    proxy=proxy, verify=secure, limits=limits
                )
        elif transport is None:
            raise httpx.UnsupportedProtocol(f"{base_url}: the URL must start with http(s)://")
        self._origin = (url.scheme, url.host, url.port)
        self._targets: dict[str, bytes] = {}

    @property
    def connections_opened(self) -> int:
        """TCP connections this client has opened so far (its own pool only)."""
        return self._pool.opened if self._pool is not None else 0

    async def request(
        self,
        method: str,
        url: str,
        *,
        json_body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """Send ``method url`` with ``json_body`` (already encoded) and read the response."""
        if self.closed:
            raise RuntimeError("this ModelHTTP client was closed; make a new one")
        timeout = timeout_s if timeout_s is not None else self.timeout_s
        if self._pool is None:
            return await self._via_transport(method, url, json_body, timeout)
        target = self._targets.get(url)
        if target is None:
            parsed = httpx.URL(url)
            if (parsed.scheme, parsed.host, parsed.port) != self._origin:
                raise ValueError(f"{url} is not on this client's endpoint {self._origin}")
            target = self._targets[url] = parsed.raw_path
        headers = [
            (b"host", self._pool.host_header),
            (b"accept", b"application/json"),
            (b"user-agent", b"envlab"),
            *self._auth,
        ]
        if json_body is not None:
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(json_body)).encode()),
            ]
        req = h11.Request(method=method, target=target, headers=headers)
        status, raw_headers, content = await self._pool.send(req, json_body or b"", timeout)
        # h11 gives names lower-cased; a repeated header keeps its last value
        return Reply(status, {k.decode(): v.decode("latin-1") for k, v in raw_headers}, content)

    async def _via_transport(
        self, method: str, url: str, body: bytes | None, timeout: float | None
    ) -> Reply:
        assert self._transport is not None
        headers = [(b"accept", b"application/json"), *self._auth]
        if body is not None:
            headers.append((b"content-type", b"application/json"))
        limits = httpx.Timeout(timeout, connect=self.connect_timeout_s)
        request = httpx.Request(
            method, url, headers=headers, content=body, extensions={"timeout": limits.as_dict()}
        )
        response = await self._transport.handle_async_request(request)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        headers = {k.lower(): v for k, v in response.headers.items()}
        return Reply(response.status_code, headers, content)

    async def aclose(self) -> None:
        self.closed = True
        if self._pool is not None:
            self._pool.close()
        if self._transport is not None:
            await self._transport.aclose()

    async def __aenter__(self) -> ModelHTTP:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()
