"""The ``/ws`` session as a raw ASGI endpoint: frames in, frames out, no framework per message.

One connection is one ``Session``. A reader task takes the socket's messages into an inbox;
when the client goes away in the middle of a reset, step or grade, it cancels that work at once
(the session closes the episode and its sandbox on the way out). An idle session is told by the
manager's reaper (an ``idle_timeout`` error frame) and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from envlab.serve import wire
from envlab.serve.sessions import CapacityError, Session, SessionManager
from envlab.serve.wire import WireError

_IDLE = {"type": "envlab.idle"}
_GONE = {"type": "websocket.disconnect"}


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


async def _serve(session: Session, receive: Any, send: Any, idle: float) -> None:
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    me = asyncio.current_task()
    assert me is not None
    flags = {"busy": False, "gone": False}

    async def read() -> None:
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                inbox.put_nowait(message)
        except Exception:  # a broken socket is a disconnect
            pass
        flags["gone"] = True
        inbox.put_nowait(_GONE)
        if flags["busy"]:
            me.cancel()

    session.on_idle = lambda: inbox.put_nowait(_IDLE)
    reader = asyncio.get_running_loop().create_task(read())
    try:
        await _answer(session, send, idle, inbox, flags)
    except asyncio.CancelledError:
        if not flags["gone"]:
            raise
        me.uncancel()  # our own cancel: the client left mid-frame
    finally:
        reader.cancel()


async def _answer(
    session: Session,
    send: Any,
    idle: float,
    inbox: asyncio.Queue[dict[str, Any]],
    flags: dict[str, bool],
) -> None:
    get = inbox.get
    while True:
        message = await get()
        if message is _IDLE:  # the reaper found the session silent too long
            text = (
                f"the session was idle for more than {idle}s (--idle-timeout) and is closed; "
                "its episode is gone: start a new session"
            )
            frame = wire.error_frame(wire.IDLE_TIMEOUT, text)
            await send({"type": "websocket.send", "text": wire.dumps(frame)})
            return
        if message is _GONE:
            return
        session.touch()
        raw = message.get("text")
        if raw is None:
            raw = message.get("bytes") or b""
        flags["busy"] = True
        try:
            kind, data = wire.parse_client_frame(raw)
            if kind == "step":
                frame = {"type": "observation", "data": await session.step(data)}
            elif kind == "reset":
                frame = {"type": "observation", "data": await session.reset(data)}
            elif kind == "state":
                frame = wire.state_response(session.state())
            else:  # close
                return
        except WireError as e:
            frame = wire.error_frame(e.code, str(e))
        finally:
            flags["busy"] = False
        try:
            await send({"type": "websocket.send", "text": wire.dumps(frame)})
        except OSError:  # the client is gone (uvicorn's ClientDisconnected): nothing to answer
            return
