"""The ``/ws`` session as a raw ASGI endpoint: frames in, frames out, no framework per message.

One connection is one ``Session``, answered frame by frame in order. The connection reads the
socket itself between frames; while a frame's work runs longer than ``WATCH_AFTER_S``, a watcher
task reads it instead, so that a client that goes away in the middle of a reset, step or grade
cancels that work at once (the session closes the episode and its sandbox on the way out). An
idle session is told by the manager's reaper (an ``idle_timeout`` error frame) and closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

from envlab.serve import wire
from envlab.serve.sessions import CapacityError, Session, SessionManager
from envlab.serve.wire import WireError


class WebSocketEndpoint:
    """The ASGI app of ``/ws`` (Starlette mounts a class instance as raw ASGI)."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        try:
            session = self.manager.open("ws")
        except CapacityError as e:
            frame = wire.error_frame(
                wire.CAPACITY, str(e), active_sessions=e.active, max_sessions=e.max_sessions
            )
            await send({"type": "websocket.send", "text": wire.dumps(frame)})
            await send({"type": "websocket.close", "code": 1013})  # try again later
            return
        try:
            await _serve(session, receive, send, self.manager.idle_timeout)
        finally:
            await self.manager.close(session)
            with contextlib.suppress(Exception):
                await send({"type": "websocket.close", "code": 1000})


WATCH_AFTER_S = 0.02
"""A frame's work still running after this long gets a watcher on the socket, so that a client
that leaves mid-step is noticed at once (a quick frame costs one timer, no task)."""


class _Conn:
    """One connection's loop: reads frames itself while idle; a watcher task reads the socket
    only while a slow reset, step or grade runs, and cancels it if the client is gone."""

    __slots__ = (
        "gone",
        "idle",
        "me",
        "pending",
        "receive",
        "send",
        "session",
        "waiting",
        "watcher",
    )

    def __init__(self, session: Session, receive: Any, send: Any) -> None:
        self.session, self.receive, self.send = session, receive, send
        me = asyncio.current_task()
        assert me is not None
        self.me = me
        self.pending: collections.deque[dict[str, Any]] = collections.deque()
        self.watcher: asyncio.Task[None] | None = None
        self.gone = self.idle = self.waiting = False
        session.on_idle = self._on_idle

    def _on_idle(self) -> None:  # the reaper found the session silent too long
        if self.waiting:
            self.idle = True
            self.me.cancel()

    def _watch(self) -> None:
        self.watcher = asyncio.get_running_loop().create_task(self._read_while_busy())

    async def _read_while_busy(self) -> None:
        try:
            while True:
                message = await self.receive()
                if message["type"] == "websocket.disconnect":
                    break
                self.pending.append(message)  # a frame sent ahead: answered in turn
        except Exception:  # a broken socket is a disconnect
            pass
        self.gone = True
        self.me.cancel()

    async def next_message(self) -> dict[str, Any]:
        if self.pending:
            return self.pending.popleft()
        self.waiting = True
        try:
            return await self.receive()
        finally:
            self.waiting = False

    async def run_frame(self, raw: str | bytes) -> dict[str, Any] | None:
        """The answer to one frame (``None``: the client closed the session)."""
        handle = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._watch)
        try:
            kind, data = wire.parse_client_frame(raw)
            if kind == "step":
                return {"type": "observation", "data": await self.session.step(data)}
            if kind == "reset":
                return {"type": "observation", "data": await self.session.reset(data)}
            if kind == "state":
                return wire.state_response(self.session.state())
            return None  # close
        except WireError as e:
            return wire.error_frame(e.code, str(e))
        finally:
            handle.cancel()
            if self.watcher is not None:
                await self._stop_watcher()

    async def _stop_watcher(self) -> None:
        watcher, self.watcher = self.watcher, None
        assert watcher is not None
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher  # the queue keeps a message it had not taken yet


async def _serve(session: Session, receive: Any, send: Any, idle: float) -> None:
    conn = _Conn(session, receive, send)
    try:
        await _answer(conn, idle)
    except asyncio.CancelledError:
        if not (conn.gone or conn.idle):
            raise
        conn.me.uncancel()  # our own cancel: the client left mid-frame, or was silent too long
        if conn.idle and not conn.gone:
            text = (
                f"the session was idle for more than {idle}s (--idle-timeout) and is closed; "
                "its episode is gone: start a new session"
            )
            with contextlib.suppress(OSError):
                frame = wire.error_frame(wire.IDLE_TIMEOUT, text)
                await send({"type": "websocket.send", "text": wire.dumps(frame)})
    finally:
        if conn.watcher is not None:
            conn.watcher.cancel()


async def _answer(conn: _Conn, idle: float) -> None:
    session, send = conn.session, conn.send
    while True:
        message = await conn.next_message()
        if message["type"] == "websocket.disconnect":
            return
        session.touch()
        raw = message.get("text")
        if raw is None:
            raw = message.get("bytes") or b""
        frame = await conn.run_frame(raw)
        if frame is None:
            return
        try:
            await send({"type": "websocket.send", "text": wire.dumps(frame)})
        except OSError:  # the client is gone (uvicorn's ClientDisconnected): nothing to answer
            return
