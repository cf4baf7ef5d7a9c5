"""Deadlines for many concurrent episodes with one timer task instead of a timer per step.

``asyncio.timeout`` schedules a timer handle on every entry; with tens of thousands of short steps
that is a large share of the engine's cost (see ``bench/overhead.py``). Here each episode task
sets a plain deadline, and one watchdog task per event loop wakes every ``tick`` seconds and
cancels the tasks whose deadline passed. Precision is ``tick`` (10 ms): ample for timeouts of
seconds.

A deadline set with ``pausable=True`` is on the agent's clock: the episode's ``AgentClock``
(``agent_clock``, installed per episode task so that ``core.clock.not_agent_time`` reaches it)
stops it while the agent waits for something shared, and moves it later by the time paused.
While paused, the task's deadline is the limit on waiting instead (``wait_limit``, reported as
``"wait:<why>"``). Deadlines are on the task's clock: ``set`` returns one and takes ``cap`` as
one, so an episode deadline handed back before a pause still means the same agent time after.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Any

WAIT = "wait:"
"""Prefix of the reason of a deadline that fired while the agent's clock was paused."""

_Entry = tuple[float, str, bool]  # (absolute monotonic deadline, reason, pausable)


class Deadlines:
    def __init__(self, tick: float = 0.01) -> None:
        self.tick = tick
        self._deadlines: dict[asyncio.Task[Any], _Entry] = {}
        self._fired: dict[asyncio.Task[Any], str] = {}
        self._clocks: dict[asyncio.Task[Any], EpisodeClock] = {}
        self._watchdog: asyncio.Task[None] | None = None

    def set(
        self,
        task: asyncio.Task[Any],
        seconds: float | None,
        reason: str,
        *,
        cap: float | None = None,
        cap_reason: str = "",
        pausable: bool = False,
    ) -> float | None:
        """Give ``task`` a deadline ``seconds`` from now, but no later than ``cap`` (a deadline
        ``set`` returned earlier, e.g. the episode's, reported as ``cap_reason``).

        Returns the deadline that was set (on the task's clock), or ``None`` for no limit.
        """
        clock = self._clocks.get(task)
        if clock is None:
            offset, paused = 0.0, None
        else:
            offset, paused = clock.waited_s, clock.since
        now = time.monotonic() if paused is None else paused  # paused: the clock stands still
        deadline = None if seconds is None else now - offset + seconds
        if cap is not None and (deadline is None or cap < deadline):
            deadline, reason = cap, cap_reason or reason
        if deadline is None:
            self._deadlines.pop(task, None)
            if clock is not None:
                clock.parked = None
            return None
        entry = (deadline + offset, reason, pausable)
        if paused is not None and pausable:
            clock.parked = entry  # type: ignore[union-attr]  # takes effect when the pause ends
        else:
            self._deadlines[task] = entry
            if clock is not None:
                clock.parked = None
        if self._watchdog is None:
            self._arm(task)
        return deadline

    def _arm(self, task: asyncio.Task[Any]) -> None:
        if self._watchdog is None:
            self._watchdog = task.get_loop().create_task(self._watch())

    def agent_clock(self, task: asyncio.Task[Any], *, wait_limit: float | None) -> EpisodeClock:
        """The clock of ``task``'s pausable deadlines: ``start()`` it when the agent's time
        begins, ``close()`` it when the agent's time ends."""
        clock = self._clocks[task] = EpisodeClock(self, task, wait_limit)
        return clock

    def expired(self, task: asyncio.Task[Any]) -> str | None:
        """If ``task`` was cancelled by its deadline, the reason (and forget it)."""
        return self._fired.pop(task, None)

    def clear(self, task: asyncio.Task[Any]) -> bool:
        """Remove ``task``'s deadline. True if it had fired: then call ``absorb`` from the task,
        since the cancellation it caused may not have been delivered yet."""
        self._deadlines.pop(task, None)
        clock = self._clocks.get(task)
        if clock is not None:
            clock.parked = None
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
                for task, (deadline, reason, _) in list(self._deadlines.items()):
                    if task.done():
                        self._deadlines.pop(task, None)
                        self._clocks.pop(task, None)
                    elif now >= deadline:
                        self._deadlines.pop(task, None)
                        self._fired[task] = reason
                        task.cancel()
        finally:
            self._watchdog = None


class EpisodeClock:
    """The ``core.clock.AgentClock`` of one episode task: pauses its pausable deadline.

    Call it from the task's event loop; a call from another thread is handed to that loop.
    """

    __slots__ = (
        "_closed",
        "_dl",
        "_loop",
        "_task",
        "_thread",
        "_wait",
        "depth",
        "parked",
        "running",
        "since",
        "wait_limit",
        "waited_s",
        "why",
    )

    def __init__(self, dl: Deadlines, task: asyncio.Task[Any], wait_limit: float | None) -> None:
        self._dl, self._task = dl, task
        self._loop = task.get_loop()
        self._thread = threading.get_ident()
        self.wait_limit = wait_limit
        self.waited_s = 0.0
        self.depth = 0
        self.since: float | None = None
        """When the current pause began, if a pausable deadline was running then."""
        self.parked: _Entry | None = None
        """The pausable deadline while paused (moved later by the pause when it ends)."""
        self._wait: _Entry | None = None
        self.why = ""
        self.running = False
        self._closed = False

    def _elsewhere(self, method: Any, *args: Any) -> bool:
        if threading.get_ident() == self._thread:
            return False
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to time
            self._loop.call_soon_threadsafe(method, *args)
        return True

    def start(self) -> None:
        """The agent's time begins (after reset): from now on waits are taken off its clock."""
        self.running = True

    def pause(self, why: str) -> None:
        if self._closed or self._elsewhere(self.pause, why):
            return
        self.depth += 1
        if self.depth > 1 or not self.running:
            return
        dl, task = self._dl, self._task
        entry = dl._deadlines.get(task)
        if entry is not None and not entry[2]:  # a limit of the machinery's runs: leave it
            return
        now = time.monotonic()
        self.since, self.parked, self.why = now, entry, why
        if self.wait_limit is None:
            self._wait = None
            dl._deadlines.pop(task, None)
        else:
            left = max(self.wait_limit - self.waited_s, 0.0)
            self._wait = dl._deadlines[task] = (now + left, WAIT + why, False)
            dl._arm(task)

    def resume(self) -> None:
        if self._closed or self._elsewhere(self.resume):
            return
        self.depth -= 1
        if self.depth > 0 or self.since is None:
            return
        paused = time.monotonic() - self.since
        self.since = None
        self.waited_s += paused
        parked, wait = self.parked, self._wait
        self.parked = self._wait = None
        dl, task = self._dl, self._task
        if task in dl._fired or dl._deadlines.get(task) is not wait:
            return  # fired, or set or cleared while paused: nothing of ours to take back
        if parked is None:
            dl._deadlines.pop(task, None)
        else:  # the agent's deadline again, later by the pause
            dl._deadlines[task] = (parked[0] + paused, parked[1], True)
            dl._arm(task)

    def credit(self, seconds: float, why: str) -> None:
        if self._closed or self._elsewhere(self.credit, seconds, why):
            return
        if not self.running or self.since is not None:  # paused already counts it
            return
        self.waited_s += seconds
        dl, task = self._dl, self._task
        entry = dl._deadlines.get(task)
        if self.wait_limit is not None and self.waited_s > self.wait_limit:
            dl._deadlines[task] = (0.0, WAIT + why, False)  # fires at the next tick
            dl._arm(task)
        elif entry is not None and entry[2]:
            dl._deadlines[task] = (entry[0] + seconds, entry[1], True)

    def close(self) -> None:
        """Forget the clock (the episode's attempt ended); later pauses do nothing."""
        self._closed = True
        if self._dl._clocks.get(self._task) is self:
            del self._dl._clocks[self._task]


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


__all__ = ["WAIT", "Deadlines", "EpisodeClock", "deadlines"]
