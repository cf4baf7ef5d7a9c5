"""``ModelHTTP``: the one HTTP client that every episode of a run shares for one model endpoint.

A run sends many small requests to one origin, dozens in flight. ``aiohttp``'s client does it
with kept-alive connections in one pool at ~0.1 ms of CPU a request (httpx and httpcore cost
~1.5 ms there: ``bench/fixed_costs.py`` measures an ``envlab eval`` process against a plain
aiohttp script on the same stub server). The session is made on first use, in the event loop
that uses it.

- ``http://`` sets up no TLS at all; ``https://`` verifies certificates against ``certifi``'s
  CA set or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set, loaded once per client;
- an endpoint behind a proxy from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY``, ``NO_PROXY``) goes through it, looked up once per client (aiohttp's
  ``trust_env`` looks it up in a thread on every request: two thread hops a request, whose
  GIL hand-offs cost more than the request);
- a given ``transport`` (``httpx.ASGITransport`` for the in-process model) replaces the
  network: the request is handed to it as it is;
- failures are this module's two exceptions, whatever carried the request: ``RequestTimeout``
  (no connection or no reply in time) and ``TransportError`` (its base: no connection, a
  connection lost or a reply that is not HTTP).
"""

from __future__ import annotations

import json
import os
import ssl
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import aiohttp
    import httpx


MAX_REPLY_BYTES = 64 << 20
"""A model's reply larger than this is refused (a chat completion is kilobytes)."""


class TransportError(Exception):
    """The request did not get a whole HTTP reply: no connection, a lost one, or not HTTP."""


class RequestTimeout(TransportError):
    """No connection, or no reply (or no next bytes of one), within the time allowed."""


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


def _ssl_context() -> ssl.SSLContext:
    """Certificate verification as httpx sets it up: ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when
    the environment names them, else certifi's CA bundle."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    context = ssl.create_default_context()
    if cafile or capath:
        context.load_verify_locations(cafile=cafile or None, capath=capath or None)
    else:
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    return context


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY``, ``NO_PROXY``), if any."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return scheme, (parts.hostname or "").lower(), port


def _describe(e: aiohttp.ClientError) -> str:
    """What failed, named as every transport names it (``ConnectError: ...``)."""
    import aiohttp

    if isinstance(e, aiohttp.ClientConnectorError):
        return f"ConnectError: cannot connect to {e.host}:{e.port}: {e.os_error}"
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return "RemoteProtocolError: the server closed the connection before a whole reply"
    if isinstance(e, aiohttp.ClientPayloadError):
        return f"ReadError: the reply's body was cut short: {e}"
    if isinstance(e, aiohttp.ClientResponseError):
        return f"RemoteProtocolError: not an HTTP reply: {e.message}"
    return f"{type(e).__name__}: {e}"


class ModelHTTP:
    """One pooled HTTP client for the endpoint at ``base_url``, shared by a run's episodes.

    ``request()`` sends a whole body and returns the whole response (``Reply``). ``timeout_s``
    bounds the wait for a response (per request: ``request(timeout_s=)``; the time between
    bytes of a response, and the wait for a free connection), ``connect_timeout_s`` opening a
    connection; ``max_connections`` caps the pool (``None``: one connection per request in
    flight, kept for the next); a reply over ``max_reply_bytes`` is a ``TransportError``.
    ``transport`` (e.g. ``httpx.ASGITransport``) replaces the
    network.
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
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_reply_bytes = max_reply_bytes
        self.connect_timeout_s = connect_timeout_s
        self.closed = False
        self._origin = _origin(base_url)
        if transport is None and self._origin[0] not in ("http", "https"):
            raise ValueError(f"{base_url}: the URL must start with http:// or https://")
        self._headers = {"Accept": "application/json", "User-Agent": "envlab"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._json_headers = {**self._headers, "Content-Type": "application/json"}
        self._checked: set[str] = set()  # URLs found on this client's endpoint
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        self._transport = transport
        self._ssl: ssl.SSLContext | bool = (
            _ssl_context() if self._origin[0] == "https" and transport is None else False
        )
        self._max_connections = max_connections
        self._proxy = _proxy_for(base_url) if transport is None else None
        self._session: aiohttp.ClientSession | None = None

    def _new_session(self) -> aiohttp.ClientSession:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self._max_connections or 0, ssl=self._ssl, keepalive_timeout=30.0
        )
        return aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=True,
        )

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
        if self._transport is not None:
            return await self._via_transport(method, url, json_body, timeout)
        if url not in self._checked:
            if _origin(url) != self._origin:
                raise ValueError(f"{url} is not on this client's endpoint {self._origin}")
            self._checked.add(url)
        return await self._via_aiohttp(method, url, json_body, timeout)

    async def _via_aiohttp(
        self, method: str, url: str, body: bytes | None, timeout: float | None
    ) -> Reply:
        import aiohttp

        if self._session is None:
            self._session = self._new_session()
        headers = self._headers if body is None else self._json_headers
        limits = self._timeouts.get(timeout)
        if limits is None:
            limits = self._timeouts[timeout] = aiohttp.ClientTimeout(
                total=None, connect=timeout, sock_connect=self.connect_timeout_s, sock_read=timeout
            )
        try:
            async with self._session.request(
                method, url, data=body, headers=headers, timeout=limits, proxy=self._proxy
            ) as resp:
                content = await self._body(resp, url)
                # names lower-cased; a repeated header keeps its last value
                return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, content)
        except TimeoutError as e:
            raise RequestTimeout(f"ReadTimeout: no reply from {url} within {timeout}s") from e
        except aiohttp.ClientError as e:
            raise TransportError(_describe(e)) from e

    async def _body(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The reply's body, refused past ``max_reply_bytes`` (an endpoint that streams without
        end would fill this process's memory)."""
        cap = self.max_reply_bytes
        if (resp.content_length or 0) > cap:
            raise TransportError(f"{url} sent a reply of {resp.content_length} bytes, over {cap}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > cap:
                raise TransportError(f"{url} sent a reply of more than {cap} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _via_transport(
        self, method: str, url: str, body: bytes | None, timeout: float | None
    ) -> Reply:
        import httpx

        assert self._transport is not None
        headers = self._headers if body is None else self._json_headers
        limits = httpx.Timeout(timeout, connect=self.connect_timeout_s)
        request = httpx.Request(
            method, url, headers=headers, content=body, extensions={"timeout": limits.as_dict()}
        )
        try:
            response = await self._transport.handle_async_request(request)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
        except httpx.TimeoutException as e:
            kind = type(e).__name__
            raise RequestTimeout(f"{kind}: no reply from {url} within {timeout}s") from e
        except httpx.TransportError as e:
            raise TransportError(f"{type(e).__name__}: {e}") from e
        headers_out = {k.lower(): v for k, v in response.headers.items()}
        return Reply(response.status_code, headers_out, content)

    async def aclose(self) -> None:
        self.closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
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
