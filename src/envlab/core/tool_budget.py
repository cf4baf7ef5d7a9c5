"""Sync tool calls off the event loop, each within a time and CPU budget.

A ``ToolEnv``'s sync tools run in a worker thread of one process-wide pool (``WORKERS``
threads) instead of on the event loop, so a slow tool delays its own episode only: the loop
keeps serving every other episode (a pure-Python tool gives the loop the GIL every
``sys.getswitchinterval()``; ``bench/tools_offloop.py`` measures both). A thread is the only
runner that fits every tool: tools mutate their episode (``self``: SQLite connections, lists),
which a process cannot share.

A watchdog thread checks the calls in flight every ``TICK`` seconds: past its wall budget
(``Limits.tool_call_s``) or CPU budget (``Limits.tool_cpu_s``, the CPU time of the tool's own
thread) a call is over budget: its awaiter gets ``ToolOverrun`` at once, and the thread is
asked to stop: ``ToolAbandoned`` (a ``BaseException``, so ``except Exception`` in a tool does
not swallow it) is raised in it at its next Python instruction (CPython's
``PyThreadState_SetAsyncExc``). A thread cannot be killed, so a call stuck inside one C
function (a long big-int operation, a blocking read) runs on until that function returns, and
holds its worker until then; the pool is bounded, a call that finds every worker busy waits
for one off the agent's clock. What a call over budget means for its episode is ``ToolEnv``'s.

One C function that holds the GIL (a big-int power, a regex backtracking) stalls every thread,
the loop and the watchdog included, and no thread can stop it; so does a straight run of such
operations in one code object (``eval`` of a long expression: CPython 3.11 looks for a GIL
hand-over at calls and backward jumps, not between two arithmetic operations). Measured: a
5 KB ``calculate`` held the GIL 50 s in a thread, past its CPU budget, unseen by the
watchdog. Tools whose input decides such costs bound them before running (τ's
``calculate``: ``envlab.core.arith_cost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from envlab.core.clock import not_agent_time
from envlab.core.limits import Limits

log = logging.getLogger("envlab.tools")

WORKERS = 32
"""Threads of the tool pool (process-wide). A call over budget holds its worker until its
thread returns."""
TICK = 0.02
"""How often the watchdog checks the calls in flight (the budgets' precision)."""


class ToolAbandoned(BaseException):
    """Raised inside a tool's thread once its call ran past its budget: nothing more of the
    call runs, beyond the C function it may be inside."""


class ToolOverrun(Exception):
    """A tool call ran past its budget (or was cancelled while running): its thread was told
    to stop and the call's result, if one ever comes, is dropped."""


@dataclass(frozen=True, slots=True)
class ToolBudget:
    """What one sync tool call may spend: wall seconds and CPU seconds of its thread
    (``None``: no limit)."""

    wall_s: float | None = 60.0
    cpu_s: float | None = 10.0

    @classmethod
    def of(cls, limits: Limits) -> ToolBudget:
        return cls(limits.tool_call_s, limits.tool_cpu_s)

    def describe(self) -> str:
        parts = [f"{self.wall_s:g}s of time" if self.wall_s is not None else ""]
        parts.append(f"{self.cpu_s:g}s of CPU" if self.cpu_s is not None else "")
        return " and ".join(p for p in parts if p) or "no limit"


class _Call:
    """One call in flight: run by a worker thread, watched by the watchdog, awaited on a loop."""

    __slots__ = (
        "budget",
        "cpu0",
        "ended",
        "fn",
        "future",
        "ident",
        "injected",
        "lock",
        "loop",
        "over",
        "pool",
        "started",
        "state",
        "wake_on_start",
    )

    def __init__(self, fn: Callable[[], Any], budget: ToolBudget) -> None:
        self.fn, self.budget = fn, budget
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[Any] = self.loop.create_future()
        self.ended: asyncio.Future[None] = self.loop.create_future()
        """Done when the thread has left the call (later than ``future`` for one abandoned)."""
        self.wake_on_start: asyncio.Future[None] | None = None
        self.lock = threading.Lock()
        self.state = "queued"  # queued -> running -> finished
        self.ident = 0
        self.started = self.cpu0 = 0.0
        self.injected = False
        self.over: str | None = None
        self.pool: _Pool | None = None

    # --- in the worker thread ------------------------------------------------------------------
    def run(self) -> None:
        ok, value = False, None
        try:
            with self.lock:
                self.ident, self.state = threading.get_ident(), "running"
                self.started = time.monotonic()
                abandoned = self.over is not None  # cancelled while it waited for a worker
            if self.wake_on_start is not None:
                self._to_loop(_settle, self.wake_on_start, True, None)
            if not abandoned:
                _watchdog.add(self)
                ok, value = True, self.fn()
        except ToolAbandoned:
            pass
        except BaseException as e:  # the tool's own error, for its awaiter
            value = e
        finally:
            self._finish()
        if self.over is not None:  # abandoned: whatever it returned is dropped
            ok, value = False, ToolOverrun(self.over)
        self._to_loop(self._ended, ok, value)
        if self.pool is not None:
            self.pool.freed()

    def _ended(self, ok: bool, value: Any) -> None:  # on the loop
        _settle(self.future, ok, value)
        _settle(self.ended, True, None)

    def _finish(self) -> None:
        """No async exception reaches this thread once this returns (a pending one is cleared;
        one delivered in here is the single one injected, and is taken)."""
        _watchdog.discard(self)
        while True:
            try:
                with self.lock:
                    self.state = "finished"
                    if self.injected:
                        _async_raise(self.ident, None)
                return
            except ToolAbandoned:
                continue

    def _to_loop(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(fn, *args)

    # --- from the watchdog or the loop ---------------------------------------------------------
    def abandon(self, why: str) -> None:
        """Drop the call: its awaiter gets ``ToolOverrun(why)`` (unless it is gone: cancelled),
        its thread ``ToolAbandoned``."""
        with self.lock:
            if self.over is not None or self.state == "finished":
                return
            self.over = why
            if self.state == "running":
                self.injected = _async_raise(self.ident, ToolAbandoned)
        log.warning("a tool call was abandoned: %s", why)
        self._to_loop(_settle, self.future, False, ToolOverrun(why))

    def cpu_s(self) -> float:
        """CPU seconds of the call so far, counted from the watchdog's first look at it (a
        ``TICK`` at most after it started; its worker thread's clock runs across calls)."""
        try:
            now = time.clock_gettime(time.pthread_getcpuclockid(self.ident))
        except (AttributeError, OSError):  # no per-thread clocks here, or the thread is gone
            return 0.0
        if self.cpu0 == 0.0:
            self.cpu0 = now
        return now - self.cpu0


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


_ctypes: Any = None


def _async_raise(ident: int, exc: type[BaseException] | None) -> bool:
    """Raise ``exc`` in thread ``ident`` at its next Python instruction (``None``: clear one
    pending); False where CPython's API is not there."""
    global _ctypes
    try:
        if _ctypes is None:
            import ctypes

            _ctypes = ctypes
        set_exc = _ctypes.pythonapi.PyThreadState_SetAsyncExc
    except (ImportError, AttributeError):
        return False
    obj = _ctypes.py_object(exc) if exc is not None else None
    return bool(set_exc(_ctypes.c_ulong(ident), obj))


class _Watchdog:
    """One daemon thread that checks the running calls' budgets every ``TICK``; asleep after
    ``IDLE_TICKS`` ticks without a call (woken by the next one)."""

    IDLE_TICKS = 50

    def __init__(self) -> None:
        self.calls: set[_Call] = set()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.idle = True

    def add(self, call: _Call) -> None:
        with self.cond:
            self.calls.add(call)
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="envlab-tool-watchdog")
                self.thread.daemon = True
                self.thread.start()
            if self.idle:  # ticking already: no wake-up per call
                self.idle = False
                self.cond.notify()

    def discard(self, call: _Call) -> None:
        with self.cond:
            self.calls.discard(call)

    def _watch(self) -> None:
        quiet = 0
        while True:
            with self.cond:
                quiet = 0 if self.calls else quiet + 1
                if quiet > self.IDLE_TICKS:
                    self.idle = True
                    while self.idle:
                        self.cond.wait()
                    quiet = 0
                calls = list(self.calls)
            now = time.monotonic()
            for call in calls:
                why = _over_budget(call, now)
                if why is not None:
                    self.discard(call)
                    call.abandon(why)
            time.sleep(TICK)


def _over_budget(call: _Call, now: float) -> str | None:
    b = call.budget
    if b.wall_s is not None and now - call.started > b.wall_s:
        return f"it ran longer than its budget of {b.wall_s:g}s (tool_call_s)"
    if b.cpu_s is not None and call.cpu_s() > b.cpu_s:
        return f"it used more than its budget of {b.cpu_s:g}s of CPU time (tool_cpu_s)"
    return None


_watchdog = _Watchdog()


class _Pool:
    """At most ``size`` daemon threads taking calls from one queue, started as calls come.

    Not ``ThreadPoolExecutor``: it joins its threads when the interpreter exits, so one thread
    stuck in a C call (a tool's blocking read, abandoned) would hang the process at exit."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.busy = 0  # calls submitted whose thread work has not ended
        self.threads = 0

    def submit(self, call: _Call) -> bool:
        """Queue ``call``; True when every worker was busy (it waits for one)."""
        with self.lock:
            saturated = self.busy >= self.size
            self.busy += 1
            start = self.busy > self.threads and self.threads < self.size
            self.threads += start
        if saturated:
            call.wake_on_start = call.loop.create_future()
        call.pool = self
        self.jobs.put(call.run)
        if start:
            name = f"envlab-tool-{self.threads}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return saturated

    def freed(self) -> None:
        """The end of a call's thread work: its worker is free."""
        with self.lock:
            self.busy -= 1

    def _work(self) -> None:
        while True:
            self.jobs.get()()  # _Call.run: raises nothing


_pool = _Pool(WORKERS)


class ToolRunner:
    """One episode's sync tool calls: in worker threads, one at a time and in order, each
    within ``budget``. After a call is abandoned (over budget, or its caller cancelled) the
    runner refuses every later call: the abandoned thread may still be inside the episode."""

    def __init__(self, budget: ToolBudget | None = None) -> None:
        self.budget = budget or ToolBudget()
        self._lock: asyncio.Lock | None = None
        self._last: _Call | None = None

    async def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in a worker thread (in the caller's context), within the budget.

        Raises ``ToolOverrun`` when the call runs past its budget; a cancelled caller (a step's
        deadline) abandons the call the same way before the cancellation goes on. Waiting for a
        free worker is not the agent's time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            last = self._last
            if last is not None and last.over is not None:
                raise ToolOverrun(f"not run: an earlier call was abandoned ({last.over})")
            ctx = contextvars.copy_context()
            call = self._last = _Call(lambda: ctx.run(fn), self.budget)
            try:
                if _pool.submit(call):
                    assert call.wake_on_start is not None
                    async with not_agent_time("a free tool thread"):
                        await call.wake_on_start
                return await call.future
            except asyncio.CancelledError:
                call.abandon("the call was cancelled while it ran (a deadline of the step)")
                call.future.cancel()  # nobody awaits its outcome now
                raise

    async def settled(self, grace: float) -> bool:
        """Whether the last call's thread has left it, waiting up to ``grace`` seconds."""
        call = self._last
        if call is None or call.ended.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(call.ended), grace)
        except TimeoutError:
            return False
        return True

    def after_thread(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``fn()`` on the loop once the last call's thread has left it."""
        call = self._last
        assert call is not None

        def start(_: object) -> None:
            task = call.loop.create_task(fn())
            _deferred.add(task)
            task.add_done_callback(_deferred_done)

        call.ended.add_done_callback(start)


_deferred: set[asyncio.Task[None]] = set()


def _deferred_done(task: asyncio.Task[None]) -> None:
    _deferred.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("a deferred close failed: %r", task.exception())


async def run_in_thread(fn: Callable[[], Any], budget: ToolBudget) -> Any:
    """``fn()`` in a worker thread within ``budget`` (``ToolRunner.run`` of a one-off runner)."""
    return await ToolRunner(budget).run(fn)


__all__ = [
    "TICK",
    "WORKERS",
    "ToolAbandoned",
    "ToolBudget",
    "ToolOverrun",
    "ToolRunner",
    "run_in_thread",
]
