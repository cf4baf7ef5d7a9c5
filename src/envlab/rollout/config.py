"""How a run treats its episodes: limit overrides, retries, hooks; the limits as wrappers."""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from envlab.core import (
    ConfigError,
    Environment,
    EpisodeLimits,
    Limits,
    ModelFailures,
    Reward,
    ToolEnv,
)


@dataclass(frozen=True, slots=True)
class EpisodeConfig:
    """How a run treats its episodes: the user's limit overrides and infra retries.

    The limits of an episode are ``overrides.over(spec.limits(task))``: the task's own
    limits, with what the user set explicitly on top (the one policy)."""

    overrides: Limits = field(default_factory=Limits.overrides)
    wait_timeout: float | None = 3600.0
    """The longest an attempt may wait in all for shared resources (a model's queue, a rate
    limit's backoff, a sandbox starting: ``core.clock.not_agent_time``), time that is not on
    the step and episode clocks; past it the episode is ``infra_error`` (the machinery is
    overloaded)."""
    max_retries: int = 2
    retry_backoff: float = 0.05
    max_worker_losses: int = 2
    """How many times an episode whose Ray worker died (killed, node lost) is started again on
    a fresh one. A lost try produced no trajectory, so it is not a retry of the episode: this
    budget is apart from ``max_retries`` (vet's probes, which are never retried, survive a lost
    worker too)."""
    model_failures: ModelFailures = "agent"
    """Whose failure the agent's model endpoint failing is (``core.clock.ModelFailures``): the
    agent's (scored 0, counted as model failures) unless a run that drives its own trusted
    endpoint asks for ``exclude``; the run records it and every report says so."""

    def __post_init__(self) -> None:
        if self.max_worker_losses < 0:
            raise ConfigError(f"max_worker_losses must be >= 0, got {self.max_worker_losses}")
        if self.model_failures not in ("agent", "exclude"):
            raise ConfigError(
                f"model_failures must be 'agent' or 'exclude', got {self.model_failures!r}"
            )

    def describe(self) -> dict[str, Any]:
        return {
            "overrides": self.overrides.model_dump(exclude_unset=True),
            "wait_timeout": self.wait_timeout,
            "max_retries": self.max_retries,
            "model_failures": self.model_failures,
        }


@dataclass(frozen=True, slots=True)
class EpisodeHooks:
    """Callbacks for tools that inspect an episode as it runs (``envlab vet``).

    ``after_reset(env)`` runs right after ``reset``; ``after_grade(env, reward)`` after the
    grade, before ``close``. What they return is stored in ``trajectory.info`` under their names;
    an exception in a hook is recorded there too and does not change the episode's status.
    """

    after_reset: Callable[[Environment], Awaitable[dict[str, Any]]] | None = None
    after_grade: Callable[[Environment, Reward | None], Awaitable[dict[str, Any]]] | None = None


def describe_exception(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__, limit=-3)
    return f"{type(e).__name__}: {e}\n" + "".join(tb[-3:])


def wrap_for_limits(env: Environment, limits: Limits) -> Environment:
    """The engine's own limits as one wrapper (``EpisodeLimits``: order checks, then steps,
    then time, as ``OrderEnforcing(StepLimit(EpisodeTimeLimit(env)))`` would).
    A ``ToolEnv`` also gets the episode's limits for its tool calls' budget (the user's
    overrides included), before its reset reads them."""
    if isinstance(env, ToolEnv):
        env.episode_limits = limits
    return EpisodeLimits(env, max_steps=limits.max_steps, seconds=limits.episode_timeout_s)
