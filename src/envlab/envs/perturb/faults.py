"""The faults a tool call can meet: timeout, transient, latency, rate_limit, stale, truncate,
malformed (``inject`` is in ``inject.py``). ``docs/robustness.md`` describes each."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

from envlab.core import ToolResult
from envlab.core.toolenv import TRUNCATED_MARK
from envlab.envs.perturb.base import (
    RETRYABLE_MARK,
    CallContext,
    Perturbation,
    Proceed,
    count,
    positive,
    probability,
    split_params,
)


def _fires(p: Perturbation, ctx: CallContext, prob: float) -> bool:
    return ctx.rng(p).random() < prob


@dataclass(frozen=True)
class Timeout(Perturbation):
    name = "timeout"
    syntax = "P[:WAIT_S]"
    summary = (
        "with probability P a call is not run and answers a timeout error, after waiting "
        "WAIT_S seconds (default 0; past the step limit the step times out)"
    )
    p: float
    wait: float = 0.0

    @classmethod
    def parse(cls, value: str) -> Timeout:
        parts = split_params(value, 2, "timeout")
        wait = positive(parts[1], "timeout's WAIT_S", zero=True) if len(parts) > 1 else 0.0
        return cls(probability(parts[0], "timeout's P"), wait)

    def params(self) -> list[float | int]:
        return [self.p, self.wait] if self.wait else [self.p]

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        if not _fires(self, ctx, self.p):
            return await proceed()
        if self.wait:
            await asyncio.sleep(self.wait)
        ctx.record(self, waited_s=self.wait)
        after = f" after {self.wait:g}s" if self.wait else ""
        return ctx.refuse(
            f"{RETRYABLE_MARK} the call to '{ctx.call.name}' timed out{after}; it was not run "
            "and may be sent again"
        )


def call_key(ctx: CallContext) -> str:
    """The call's tool and arguments, canonical: the same call sent again has the same key."""
    args = ctx.call.arguments
    raw = args if isinstance(args, str) else None
    try:
        if isinstance(args, str):
            args = json.loads(args or "{}")
        return f"{ctx.call.name}\0{json.dumps(args, sort_keys=True, default=str)}"
    except (json.JSONDecodeError, RecursionError):  # not JSON, or nested past the parser
        if raw is None:
            raw = repr(args)
        return f"{ctx.call.name}\0{raw}"


@dataclass(frozen=True)
class Transient(Perturbation):
    name = "transient"
    syntax = "P[:FAILS]"
    summary = (
        "with probability P a new call (a tool and arguments not sent before) fails its first "
        "FAILS attempts (default 1) with a retryable error, the tool not run; the same call "
        "sent again then runs"
    )
    p: float
    failures: int = 1

    @classmethod
    def parse(cls, value: str) -> Transient:
        parts = split_params(value, 2, "transient")
        fails = count(parts[1], "transient's FAILS") if len(parts) > 1 else 1
        return cls(probability(parts[0], "transient's P"), fails)

    def params(self) -> list[float | int]:
        return [self.p] if self.failures == 1 else [self.p, self.failures]

    def new_state(self) -> dict[str, int]:
        return {}  # call key -> failures still to come

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        key = call_key(ctx)
        left = state.get(key)
        if left is None:
            left = self.failures if _fires(self, ctx, self.p) else 0
        if left == 0:
            state[key] = 0
            return await proceed()
        state[key] = left - 1
        ctx.record(self, attempt=self.failures - left + 1, failures=self.failures)
        return ctx.refuse(
            f"{RETRYABLE_MARK} transient failure of '{ctx.call.name}': the service is "
            "temporarily unavailable and the call was not run; send the same call again"
        )


@dataclass(frozen=True)
class Latency(Perturbation):
    name = "latency"
    syntax = "MEAN_S|LOW_S:HIGH_S"
    summary = (
        "every call waits first: an exponential delay of mean MEAN_S seconds, or a uniform "
        "one between LOW_S and HIGH_S"
    )
    low: float
    high: float | None = None
    """``None``: ``low`` is the mean of an exponential delay."""

    @classmethod
    def parse(cls, value: str) -> Latency:
        parts = split_params(value, 2, "latency")
        if len(parts) == 1:
            return cls(positive(parts[0], "latency's MEAN_S"))
        low = positive(parts[0], "latency's LOW_S", zero=True)
        high = positive(parts[1], "latency's HIGH_S", zero=True)
        if high < low:
            raise ValueError(f"latency needs LOW_S <= HIGH_S, got {value!r}")
        return cls(low, high)

    def params(self) -> list[float | int]:
        return [self.low] if self.high is None else [self.low, self.high]

    def delay(self, r: random.Random) -> float:
        return r.expovariate(1 / self.low) if self.high is None else r.uniform(self.low, self.high)

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        seconds = self.delay(ctx.rng(self))
        ctx.record(self, seconds=seconds)
        await asyncio.sleep(seconds)
        return await proceed()


@dataclass(frozen=True)
class RateLimit(Perturbation):
    name = "rate_limit"
    syntax = "N[/WINDOW_STEPS]"
    summary = (
        "at most N calls run in any WINDOW_STEPS consecutive steps (default 1); a call past "
        "that answers a retryable error saying in how many steps to retry, the tool not run"
    )
    calls: int
    window: int = 1

    @classmethod
    def parse(cls, value: str) -> RateLimit:
        n, sep, w = value.partition("/")
        window = count(w, "rate_limit's WINDOW_STEPS") if sep else 1
        return cls(count(n, "rate_limit's N"), window)

    def params(self) -> list[float | int]:
        return [self.calls] if self.window == 1 else [self.calls, self.window]

    def describe(self) -> str:
        return f"{self.name}=" + "/".join(str(v) for v in self.params())

    def new_state(self) -> list[int]:
        return []  # the steps of the calls that ran, within the window

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        state[:] = [s for s in state if s > ctx.step - self.window]
        if len(state) < self.calls:
            state.append(ctx.step)
            return await proceed()
        retry_after = min(state) + self.window - ctx.step
        ctx.record(
            self,
            calls_in_window=len(state),
            limit=self.calls,
            window=self.window,
            retry_after_steps=retry_after,
        )
        return ctx.refuse(
            f"{RETRYABLE_MARK} rate limit exceeded: at most {self.calls} call(s) per "
            f"{self.window} step(s); the call was not run; send it again in {retry_after} "
            "step(s)"
        )


@dataclass
class _History:
    snapshots: list[Any] = field(default_factory=list)
    """The states before the last ``lag`` writes, oldest first."""
    writes: int = 0


@dataclass(frozen=True)
class Stale(Perturbation):
    name = "stale"
    syntax = "P[:K_WRITES]"
    summary = (
        "with probability P a read tool (not @tool(writes=True)) answers from the state as of "
        "K_WRITES writes ago (default 1; fewer if fewer happened); needs snapshot()/restore()"
    )
    needs_snapshots = True
    p: float
    lag: int = 1

    @classmethod
    def parse(cls, value: str) -> Stale:
        parts = split_params(value, 2, "stale")
        lag = count(parts[1], "stale's K_WRITES") if len(parts) > 1 else 1
        return cls(probability(parts[0], "stale's P"), lag)

    def params(self) -> list[float | int]:
        return [self.p] if self.lag == 1 else [self.p, self.lag]

    def new_state(self) -> _History:
        return _History()

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        env: Any = ctx.env
        if ctx.tool.writes:
            before = env.snapshot()
            result = await proceed()
            if not result.is_error:  # a refused write changed nothing
                state.writes += 1
                state.snapshots.append(before)
                del state.snapshots[: -self.lag]
            return result
        if not state.snapshots or not _fires(self, ctx, self.p):
            return await proceed()
        now = env.snapshot()
        env.restore(state.snapshots[0])
        try:
            result = await proceed()
        finally:
            env.restore(now)
        ctx.record(self, lag=len(state.snapshots), writes=state.writes)
        return result


@dataclass(frozen=True)
class Truncate(Perturbation):
    name = "truncate"
    syntax = "P[:FRACTION]"
    summary = "with probability P a result is cut to its first FRACTION of characters (default 0.5)"
    p: float
    fraction: float = 0.5

    @classmethod
    def parse(cls, value: str) -> Truncate:
        parts = split_params(value, 2, "truncate")
        fraction = probability(parts[1], "truncate's FRACTION") if len(parts) > 1 else 0.5
        if fraction >= 1.0:
            raise ValueError(f"truncate's FRACTION must be below 1 (a cut), got {parts[1]}")
        return cls(probability(parts[0], "truncate's P"), fraction)

    def params(self) -> list[float | int]:
        return [self.p] if self.fraction == 0.5 else [self.p, self.fraction]

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        result = await proceed()
        if result.is_error or not result.content or not _fires(self, ctx, self.p):
            return result
        keep = int(len(result.content) * self.fraction)
        ctx.record(self, kept_chars=keep, of_chars=len(result.content))
        result.content = (
            f"{result.content[:keep]}\n{TRUNCATED_MARK}: {keep} of {len(result.content)} "
            "characters shown]"
        )
        return result


def break_json(text: str, r: random.Random) -> tuple[str, str] | None:
    """``text`` as JSON that does not parse, and how it was broken; ``None`` for a text that
    is not JSON (a plain answer such as a user id has no JSON to break)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # nested past the parser: not JSON to it
        return None
    if not isinstance(value, dict | list):  # a number, a string: a JSON wrapper left open
        return '{"result": ' + text.strip(), "unterminated_wrapper"
    how = r.choice(["unterminated", "quote_dropped", "stray_brace"])
    if how == "quote_dropped":
        quotes = [i for i, c in enumerate(text) if c == '"']
        i = r.choice(quotes) if quotes else len(text) - 1
        broken = text[:i] + text[i + 1 :]
    elif how == "stray_brace":
        i = r.randrange(1, len(text))
        broken = text[:i] + "}" + text[i:]
    else:
        broken = text.rstrip()[:-1]
    try:
        json.loads(broken)
    except (json.JSONDecodeError, RecursionError):
        return broken, how
    return text.rstrip()[:-1], "unterminated"


@dataclass(frozen=True)
class Malformed(Perturbation):
    name = "malformed"
    syntax = "P"
    summary = (
        "with probability P a JSON result is broken (a bracket or quote lost or added; a "
        "number or string left in an open wrapper); a result that is not JSON is left alone"
    )
    p: float

    @classmethod
    def parse(cls, value: str) -> Malformed:
        return cls(probability(split_params(value, 1, "malformed")[0], "malformed's P"))

    def params(self) -> list[float | int]:
        return [self.p]

    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        result = await proceed()
        r = ctx.rng(self)
        if result.is_error or r.random() >= self.p:
            return result
        broken = break_json(result.content, r)
        if broken is not None:
            result.content, how = broken
            ctx.record(self, how=how)
        return result
