"""``Turnstile``: requests take turns at one engine, first come first served, from any event loop.

A model in this process (llama.cpp) serves one request at a time. The wait for a turn happens
in async code, so that it can be marked as time that is not the agent's
(``core.clock.not_agent_time``), and the turn passes on when the engine's worker thread has
really finished (a cancelled request's generation stops at the next token, but the engine is
busy until then). Works across event loops and threads: the in-process agent's loop and a
``BackgroundServer``'s may share one engine.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class Turn:
    """One granted turn. The worker ``claim``s it and calls ``Turnstile.release`` when done; if
    the request gives up before a worker claimed it, ``abandon`` passes the turn on."""

    __slots__ = ("_mutex", "_state", "_turns")

    def __init__(self, turns: Turnstile) -> None:
        self._turns = turns
        self._mutex = threading.Lock()
        self._state = "granted"

    def claim(self) -> bool:
        """Start using the turn (from the worker thread); False if it was abandoned."""
        with self._mutex:
            if self._state != "granted":
                return False
            self._state = "used"
            return True

    def finish(self) -> None:
        """The worker is done with the engine: the next request's turn."""
        with self._mutex:
            if self._state != "used":
                return
            self._state = "done"
        self._turns.release()

    def abandon(self) -> None:
        """The request gave up; if no worker took the turn, pass it on now."""
        with self._mutex:
            if self._state != "granted":
                return
            self._state = "abandoned"
        self._turns.release()


class Turnstile:
    """A fair lock whose ``acquire`` is awaited from any event loop and ``release`` called from
    any thread."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._busy = False
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> Turn:
        """Wait for the engine; returns the ``Turn`` to hand to the worker."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._busy and not self._waiters:
                self._busy = True
                return Turn(self)
            waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] = (
                loop,
                loop.create_future(),
            )
            self._waiters.append(waiter)
        try:
            await waiter[1]
        except BaseException:
            with self._mutex:
                granted = waiter not in self._waiters
                if not granted:
                    self._waiters.remove(waiter)
            if granted:  # the turn came as we gave up: pass it on
                self.release()
            raise
        return Turn(self)

    def release(self) -> None:
        """Give the engine to the next waiter (from any thread), or mark it free."""
        with self._mutex:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_grant, fut)
                    return
                except RuntimeError:  # that loop is closed: its request is gone
                    continue
            self._busy = False


def _grant(fut: asyncio.Future[None]) -> None:
    if fut.done():  # cancelled meanwhile: its owner sees it was granted and passes it on
        return
    fut.set_result(None)
