"""Deadlines for many concurrent episodes with one timer task instead of a timer per step.

``asyncio.timeout`` schedules a timer handle on every entry; with tens of thousands of short steps
that is a large share of the engine's cost (see ``bench/overhead.py``). Here each episode task
sets a plain deadline, and one watchdog task per event loop wakes every ``tick`` seconds and
cancels the tasks whose deadline passed. Precision is ``tick`` (10 ms): ample for timeouts of
seconds.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any


class Deadlines:
    def __init__(self, tick: float = 0.01) -> None:
        self.tick = tick
        self._deadlines: dict[asyncio.Task[Any], tuple[float, str]] = {}
        self._fired: dict[asyncio.Task[Any], str] = {}
        self._watchdog: asyncio.Task[None] | None = None

    def set(
        self,
        task: asyncio.Task[Any],
        seconds: float | None,
        reason: str,
        *,
        cap: float | None = None,
        cap_reason: str = "",
    ) -> float | None:
        """Give the current task a deadline ``seconds`` from now, but no later than ``cap``
        (an absolute ``time.monotonic()``, e.g. the episode's deadline, reported as ``cap_reason``).

        Returns the absolute deadline that was set, or ``None`` for no limit.
        """
        deadline = None if seconds is None else time.monotonic() + seconds
        if cap is not None and (deadline is None or cap < deadline):
            deadline, reason = cap, cap_reason or reason
        if deadline is None:
            self._deadlines.pop(task, None)
            return None
        self._deadlines[task] = (deadline, reason)
        if self._watchdog is None:
            self._watchdog = task.get_loop().create_task(self._watch())
        return deadline

    def expired(self, task: asyncio.Task[Any]) -> str | None:
        """If ``task`` was cancelled by its deadline, the reason (and forget it)."""
        return self._fired.pop(task, None)

    def clear(self, task: asyncio.Task[Any]) -> bool:
        """Remove ``task``'s deadline. True if it had fired: then call ``absorb`` from the task,
        since the cancellation it caused may not have been delivered yet."""
        self._deadlines.pop(task, None)
        return task in self._fired

    async def absorb(self, task: asyncio.Task[Any]) -> str | None:
        """Take a fired deadline's cancellation if still pending, so later awaits run normally.
        Returns the reason it fired."""
        reason = self._fired.pop(task, None)
        if reason is not None:
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                task.uncancel()
        return reason

    async def _watch(self) -> None:
        try:
            while self._deadlines:
                await asyncio.sleep(self.tick)
                now = time.monotonic()
                for task, (deadline, reason) in list(self._deadlines.items()):
                    if task.done():
                        self._deadlines.pop(task, None)
                    elif now >= deadline:
                        self._deadlines.pop(task, None)
                        self._fired[task] = reason
                        task.cancel()
        finally:
            self._watchdog = None


_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Deadlines] = (
    weakref.WeakKeyDictionary()
)


_last: tuple[asyncio.AbstractEventLoop | None, Deadlines | None] = (None, None)


def deadlines() -> Deadlines:
    """The ``Deadlines`` of the running event loop."""
    global _last
    loop = asyncio.get_running_loop()
    if _last[0] is loop and _last[1] is not None:
        return _last[1]
    d = _per_loop.get(loop)
    if d is None:
        d = _per_loop[loop] = Deadlines()
    _last = (loop, d)
    return d


__all__ = ["Deadlines", "deadlines"]
