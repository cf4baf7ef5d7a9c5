"""What every perturbation is: a seeded middleware around one tool call of a ``ToolEnv``.

A perturbation sees each call of a known tool as a ``CallContext`` and a ``proceed()`` that
runs the rest of the chain (the other perturbations, then the tool). It may answer without
proceeding (a timeout), proceed later (latency), proceed on an earlier state (a stale read)
or change what comes back (truncated, malformed, injected). Its randomness comes only from
``ctx.rng(self)``: seeded by the episode's seed, task, the perturbation and the call's number,
so the same seed injects the same faults. Every fault is recorded with ``ctx.record``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from envlab.core import ConfigError, ToolCall, ToolEnv, ToolResult
from envlab.core.toolenv import RETRYABLE_MARK
from envlab.core.tools import ToolSpec

Proceed = Callable[[], Awaitable[ToolResult]]
"""Runs the rest of the chain for this call (inner perturbations, then the tool itself)."""

__all__ = ["RETRYABLE_MARK", "CallContext", "Perturbation", "Proceed", "SupportsSnapshot"]


@runtime_checkable
class SupportsSnapshot(Protocol):
    """An environment whose tool-visible state can be saved and put back (stale reads)."""

    def snapshot(self) -> Any:
        """The state the tools read, as it is now (an opaque value for ``restore``)."""

    def restore(self, snap: Any) -> None:
        """Put the state back as it was at ``snap``."""


@dataclass(slots=True)
class CallContext:
    """One tool call as the perturbations see it."""

    env: ToolEnv
    call: ToolCall
    call_id: str
    tool: ToolSpec
    step: int
    """The episode's step (``env.n_steps``, 1-based) the call belongs to."""
    ordinal: int
    """The call's number among the episode's calls of known tools (0-based)."""
    seed_key: str
    faults: list[dict[str, Any]]

    def rng(self, p: Perturbation) -> random.Random:
        """The generator of ``p`` for this call: the same seed, task, ``p`` and call number
        give the same draws in every process."""
        return random.Random(f"{self.seed_key}:{p.describe()}:{self.ordinal}")

    def record(self, p: Perturbation, **details: Any) -> None:
        self.faults.append(
            {
                "fault": p.name,
                "step": self.step,
                "tool": self.call.name,
                "call_id": self.call_id,
                **details,
            }
        )

    def refuse(self, message: str) -> ToolResult:
        """Answer the call with an error without running the tool."""
        return self.env.refuse_call(self.call, self.call_id, message)


class Perturbation(ABC):
    """A fault injected into tool calls; ``name=VALUE`` on the command line (``syntax``)."""

    name: ClassVar[str]
    syntax: ClassVar[str]
    """The parameter syntax, e.g. ``P[:WAIT_S]``."""
    summary: ClassVar[str]
    needs_snapshots: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def parse(cls, value: str) -> Perturbation:
        """The perturbation of the text after ``name=``; ``ValueError`` if it is not one."""

    @abstractmethod
    def params(self) -> list[float | int]:
        """The parameters, in the order of ``syntax``, trailing defaults left out."""

    def describe(self) -> str:
        """The canonical text (``stale=0.2``): parsing it gives back an equal perturbation."""
        return f"{self.name}=" + ":".join(_fmt(v) for v in self.params())

    def __str__(self) -> str:
        return self.describe()

    def new_state(self) -> Any:
        """What the perturbation keeps across one episode's calls (``None``: nothing)."""
        return None

    def check(self, env: ToolEnv) -> None:
        """Refuse an environment this perturbation cannot work on (a ``ConfigError``)."""
        if self.needs_snapshots and not isinstance(env, SupportsSnapshot):
            raise ConfigError(
                f"the perturbation {self.name} needs an environment with snapshots: "
                f"{type(env).__name__} must implement snapshot() -> Any (the state its tools "
                "read) and restore(snap) -> None (put it back), as the τ domains do "
                "(TauEpisode: SQLite serialize/deserialize); and mark its writing tools "
                "@tool(writes=True)"
            )

    @abstractmethod
    async def apply(self, ctx: CallContext, state: Any, proceed: Proceed) -> ToolResult:
        """Answer the call ``ctx``: proceed or not, change the result or not; record faults."""


def _fmt(v: float | int) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def probability(text: str, what: str) -> float:
    p = float(text)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{what} must be a probability in [0, 1], got {text}")
    return p


def positive(text: str, what: str, *, zero: bool = False) -> float:
    x = float(text)
    if not (x >= 0 if zero else x > 0) or x != x or x == float("inf"):
        raise ValueError(f"{what} must be a finite number {'>=' if zero else '>'} 0, got {text}")
    return x


def count(text: str, what: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {text}")
    return int(text)


def split_params(value: str, most: int, what: str) -> list[str]:
    parts = [x.strip() for x in value.split(":")]
    if not value.strip() or len(parts) > most or any(not x for x in parts):
        raise ValueError(f"{what} takes 1 to {most} parameters separated by ':', got {value!r}")
    return parts
