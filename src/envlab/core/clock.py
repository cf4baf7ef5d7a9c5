"""Time that is not the agent's: waiting for something shared is never on its clock.

An episode's step and episode limits measure the agent. Waiting for a shared model (the
embedded engine's queue, a rate limit's backoff, a connection retry) or for a sandbox to start
is the machinery's time, so whoever waits on an agent's behalf says so::

    async with not_agent_time("model queue"):
        await turn.acquire()

and, for time known only afterwards not to have been the agent's (a request that failed and
will be retried)::

    credit_not_agent_time(seconds, "failed model request")

The episode driver installs an ``AgentClock`` per episode task (``install_agent_clock``); it
stops the agent's limits for the duration and records the time (``Timings.waited_s``).
Outside an episode, or in a phase whose limit is the machinery's own (reset, grade), these do
nothing. The clock is per task: child tasks of the episode share it (context variables are
inherited), other episodes are not affected. Waits are bounded separately (the episode's
``wait_timeout``: past it the episode is the machinery's failure, ``infra_error``).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Literal, Protocol

ModelFailures = Literal["agent", "exclude"]
"""Whose failure an agent's model endpoint failing is (``EpisodeConfig.model_failures``):
``agent`` (the default: the agent is model + harness + operations; its endpoint's 5xx, timeouts
and malformed replies are its own failure, scored 0, and the time they take is on its clock) or
``exclude`` (a run that drives its own trusted endpoint, a trainer's generation server: such
episodes are ``infra_error``, retried and excluded, and the endpoint's time is not the agent's)."""


class AgentClock(Protocol):
    """What ``not_agent_time`` drives; rollout implements it on its deadlines."""

    def pause(self, why: str) -> None:
        """Stop the agent's clock (nested and concurrent pauses count once)."""
        ...

    def resume(self) -> None:
        """End one ``pause``; the clock runs again when the last one ends."""
        ...

    def credit(self, seconds: float, why: str) -> None:
        """Give back ``seconds`` already spent that were not the agent's."""
        ...

    @property
    def waited_s(self) -> float:
        """Seconds taken off the agent's clock so far."""
        ...


_clock: ContextVar[AgentClock | None] = ContextVar("envlab_agent_clock", default=None)


def install_agent_clock(clock: AgentClock | None) -> Token[AgentClock | None]:
    """Make ``clock`` the agent clock of the current task (and of the tasks it starts)."""
    return _clock.set(clock)


def reset_agent_clock(token: Token[AgentClock | None]) -> None:
    _clock.reset(token)


class not_agent_time:
    """Context manager (``async with`` or ``with``): the time inside is not the agent's."""

    __slots__ = ("_clock", "why")

    def __init__(self, why: str) -> None:
        self.why = why
        self._clock: AgentClock | None = None

    def __enter__(self) -> not_agent_time:
        clock = _clock.get()
        if clock is not None:
            clock.pause(self.why)
            self._clock = clock
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clock, self._clock = self._clock, None
        if clock is not None:
            clock.resume()

    async def __aenter__(self) -> not_agent_time:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def credit_not_agent_time(seconds: float, why: str) -> None:
    """Take ``seconds`` that were already spent, and were not the agent's, off its clock."""
    clock = _clock.get()
    if clock is not None and seconds > 0:
        clock.credit(seconds, why)


_model_failures: ContextVar[ModelFailures] = ContextVar("envlab_model_failures", default="agent")


def install_model_failures(policy: ModelFailures) -> Token[ModelFailures]:
    """Set whose failure the agent's model endpoint failing is, for the current episode task."""
    return _model_failures.set(policy)


def reset_model_failures(token: Token[ModelFailures]) -> None:
    _model_failures.reset(token)


def model_failures() -> ModelFailures:
    """The current episode's ``ModelFailures`` policy (``agent`` outside an episode)."""
    return _model_failures.get()


def not_agent_seconds() -> float:
    """Seconds of the current episode not on the agent's clock so far (0 outside an episode)."""
    clock = _clock.get()
    return clock.waited_s if clock is not None else 0.0


__all__ = [
    "AgentClock",
    "ModelFailures",
    "credit_not_agent_time",
    "install_agent_clock",
    "install_model_failures",
    "model_failures",
    "not_agent_seconds",
    "not_agent_time",
    "reset_agent_clock",
    "reset_model_failures",
]
