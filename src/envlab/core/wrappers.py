"""Wrappers: an ``Environment`` around an ``Environment``, gymnasium-style, that compose.

``StepLimit``, ``EpisodeTimeLimit`` and ``OrderEnforcing`` are the engine's own limits; a
perturbation is a wrapper too. Wrap one episode directly (``StepLimit(env, max_steps=5)``) or
every episode of a spec (``spec.wrap(StepLimit, max_steps=5)``), whose hash then includes the
wrapper's code and parameters. Every method is passed on explicitly, nothing by ``__getattr__``.

A method that only passes a call on, or checks something before it, returns the inner
episode's awaitable instead of awaiting it in a coroutine of its own (``await wrapper.step(a)``
is the same; the engine's per-episode cost is one coroutine frame less per layer and call). A
wrapper that changes a result is an ``async def`` as usual.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from envlab.core.clock import not_agent_seconds
from envlab.core.environment import Environment
from envlab.core.errors import ConfigError, EpisodeOrderError, EpisodeTimeExceeded
from envlab.core.limits import Limits
from envlab.core.rubric import Reward
from envlab.core.spec import EnvSpec, _hash_code, canonical_json
from envlab.core.tools import ToolSpec
from envlab.core.types import Action, Observation, StepResult, Task, TaskSet

_T = TypeVar("_T")
Awaiting = Coroutine[Any, Any, _T]
"""What ``await`` takes: an ``async def``'s result, or the one a pass-through hands on."""


_RESET_TWICE = (
    "reset() called twice: an environment serves one episode; ask the spec for a fresh one "
    "(spec.new_episode())"
)
_STEP_BEFORE_RESET = "step() called before reset(); call reset(task) first"
_STEP_AFTER_END = (
    "step() called after the episode ended (done or truncated); grade() it, close() it, and "
    "start a new episode from the spec"
)


def _grade_before_reset(what: str) -> EpisodeOrderError:
    return EpisodeOrderError(f"{what}() called before reset(): there is no episode to grade")


def _too_late(used: float, seconds: float) -> EpisodeTimeExceeded:
    return EpisodeTimeExceeded(
        f"the agent used {used:.1f}s of its time, more than the episode's {seconds}s "
        "(EpisodeTimeLimit)"
    )


def _truncate(result: StepResult, max_steps: int) -> None:
    """``StepLimit``'s end of an episode at its last step, unless it ended by itself."""
    if not result.done and not result.truncated:
        result.truncated = True
        result.info["truncated_by"] = f"StepLimit(max_steps={max_steps})"


class Wrapper(Environment):
    """An environment that passes everything on to ``env``; subclasses change what they need."""

    __slots__ = ("env",)

    def __init__(self, env: Environment) -> None:
        self.env = env

    def reset(self, task: Task, seed: int | None = None) -> Awaiting[Observation]:
        return self.env.reset(task, seed)

    def step(self, action: Action) -> Awaiting[StepResult]:
        return self.env.step(action)

    def state(self) -> dict[str, Any]:
        return self.env.state()

    def grade(self) -> Awaiting[Reward | None]:
        return self.env.grade()

    def regrade(self) -> Awaiting[Reward | None]:
        return self.env.regrade()

    def close(self) -> Awaiting[None]:
        return self.env.close()

    def export_workspace(self, dest: Path) -> Awaiting[Path | None]:
        return self.env.export_workspace(dest)

    @property
    def tools(self) -> list[ToolSpec]:
        return self.env.tools

    def system_prompt(self) -> str | None:
        return self.env.system_prompt()

    def oracle_actions(self, task: Task) -> list[Action]:
        return self.env.oracle_actions(task)

    @property
    def unwrapped(self) -> Environment:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


class StepLimit(Wrapper):
    """Truncate the episode after ``max_steps`` steps (gymnasium's ``TimeLimit``, in steps)."""

    __slots__ = ("max_steps", "n_steps")

    def __init__(self, env: Environment, *, max_steps: int) -> None:
        if max_steps < 1:
            raise ConfigError(f"StepLimit needs max_steps >= 1, got {max_steps}")
        self.env = env
        self.max_steps = max_steps
        self.n_steps = 0

    def reset(self, task: Task, seed: int | None = None) -> Awaiting[Observation]:
        self.n_steps = 0
        return self.env.reset(task, seed)

    async def step(self, action: Action) -> StepResult:
        result = await self.env.step(action)
        self.n_steps += 1
        if self.n_steps >= self.max_steps:
            _truncate(result, self.max_steps)
        return result


class EpisodeTimeLimit(Wrapper):
    """End the episode when the agent has used ``seconds`` of its own time since ``reset``.

    The time is on the agent's clock: what it waited for shared resources (``core.clock``) is
    not counted. Checked when a step comes in: a step that arrives late raises
    ``EpisodeTimeExceeded`` (the agent's ``timeout``) and is not applied. The episode driver
    also stops an agent that never comes back, at the same limit.
    """

    __slots__ = ("_clock", "_started", "seconds")

    def __init__(
        self, env: Environment, *, seconds: float, clock: Callable[[], float] | None = None
    ) -> None:
        if seconds <= 0:
            raise ConfigError(f"EpisodeTimeLimit needs seconds > 0, got {seconds}")
        self.env = env
        self.seconds = seconds
        self._clock = clock or _agent_seconds
        self._started: float | None = None

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        obs = await self.env.reset(task, seed)
        self._started = self._clock()  # building the workspace is not the agent's time
        return obs

    def elapsed(self) -> float:
        return 0.0 if self._started is None else self._clock() - self._started

    def step(self, action: Action) -> Awaiting[StepResult]:
        if self._started is not None and (used := self._clock() - self._started) > self.seconds:
            raise _too_late(used, self.seconds)
        return self.env.step(action)


def _agent_seconds() -> float:
    return time.monotonic() - not_agent_seconds()


class OrderEnforcing(Wrapper):
    """A clear error for a call out of order: ``step`` or ``grade`` before ``reset``, ``step``
    after the episode ended, a second ``reset`` (an environment serves one episode)."""

    __slots__ = ("_ended", "_reset")

    def __init__(self, env: Environment) -> None:
        self.env = env
        self._reset = False
        self._ended = False

    def reset(self, task: Task, seed: int | None = None) -> Awaiting[Observation]:
        if self._reset:
            raise EpisodeOrderError(_RESET_TWICE)
        self._reset = True
        return self.env.reset(task, seed)

    async def step(self, action: Action) -> StepResult:
        if not self._reset:
            raise EpisodeOrderError(_STEP_BEFORE_RESET)
        if self._ended:
            raise EpisodeOrderError(_STEP_AFTER_END)
        result = await self.env.step(action)
        self._ended = result.done or result.truncated
        return result

    def grade(self) -> Awaiting[Reward | None]:
        self._check_graded("grade")
        return self.env.grade()

    def regrade(self) -> Awaiting[Reward | None]:
        self._check_graded("regrade")
        return self.env.regrade()

    def _check_graded(self, what: str) -> None:
        if not self._reset:
            raise _grade_before_reset(what)


class EpisodeLimits(Wrapper):
    """The engine's own limits in one layer: ``OrderEnforcing(StepLimit(EpisodeTimeLimit(env)))``
    with the same checks, in the same order, and the same errors and ``truncated_by``.

    One frame per call instead of three: ``wrap_for_limits`` gives every episode of a run this
    layer (``None``: that limit is off). The three wrappers stay for composing by hand."""

    __slots__ = ("_clock", "_ended", "_reset", "_started", "max_steps", "n_steps", "seconds")

    def __init__(
        self,
        env: Environment,
        *,
        max_steps: int | None = None,
        seconds: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if max_steps is not None and max_steps < 1:
            raise ConfigError(f"StepLimit needs max_steps >= 1, got {max_steps}")
        if seconds is not None and seconds <= 0:
            raise ConfigError(f"EpisodeTimeLimit needs seconds > 0, got {seconds}")
        self.env = env
        self.max_steps, self.seconds = max_steps, seconds
        self._clock = clock or _agent_seconds
        self.n_steps = 0
        self._reset = self._ended = False
        self._started: float | None = None

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        if self._reset:
            raise EpisodeOrderError(_RESET_TWICE)
        self._reset = True
        self.n_steps = 0
        obs = await self.env.reset(task, seed)
        if self.seconds is not None:
            self._started = self._clock()  # building the workspace is not the agent's time
        return obs

    def elapsed(self) -> float:
        return 0.0 if self._started is None else self._clock() - self._started

    async def step(self, action: Action) -> StepResult:
        if not self._reset:
            raise EpisodeOrderError(_STEP_BEFORE_RESET)
        if self._ended:
            raise EpisodeOrderError(_STEP_AFTER_END)
        started, seconds = self._started, self.seconds
        if started is not None and seconds is not None:
            used = self._clock() - started
            if used > seconds:
                raise _too_late(used, seconds)
        result = await self.env.step(action)
        self.n_steps += 1
        if self.max_steps is not None and self.n_steps >= self.max_steps:
            _truncate(result, self.max_steps)
        self._ended = result.done or result.truncated
        return result

    def grade(self) -> Awaiting[Reward | None]:
        if not self._reset:
            raise _grade_before_reset("grade")
        return self.env.grade()

    def regrade(self) -> Awaiting[Reward | None]:
        if not self._reset:
            raise _grade_before_reset("regrade")
        return self.env.regrade()


class WrappedSpec(EnvSpec):
    """A spec whose every episode is ``wrapper(inner.new_episode(), **params)``.

    Tasks, config and limits are the inner spec's; the hash is the inner hash plus the
    wrapper's code and its parameters (which must be plain JSON values).
    """

    def __init__(self, inner: EnvSpec, wrapper: type[Wrapper], **params: Any) -> None:
        try:  # a misspelled parameter is refused here, not as an env_error in every episode
            inspect.signature(wrapper).bind(None, **params)
        except TypeError as e:
            raise ConfigError(f"bad parameters for wrapper {wrapper.__name__}: {e}") from None
        self.inner, self.wrapper, self.params = inner, wrapper, params
        self._params_json = canonical_json(params, f"the parameters of {wrapper.__name__}")
        self.config = inner.config

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:  # type: ignore[override]
        return self.inner.description

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return self.inner.tasks(seed=seed, n=n, split=split)

    def limits(self, task: Task) -> Limits:
        return self.inner.limits(task)

    def new_episode(self) -> Environment:
        return self.wrapper(self.inner.new_episode(), **self.params)

    async def prepare(self, tasks: Iterable[Task]) -> None:
        await self.inner.prepare(tasks)

    def content_hash(self) -> str:
        h = hashlib.sha256(self.inner.content_hash().encode())
        _hash_code(h, self.wrapper)
        h.update(self._params_json)
        return h.hexdigest()[:16]

    def seed_hash(self) -> str:
        return self.inner.seed_hash()

    @property
    def wrappers(self) -> list[str]:
        """The wrappers, innermost first, with their parameters."""
        inner = self.inner.wrappers if isinstance(self.inner, WrappedSpec) else []
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return [*inner, f"{self.wrapper.__name__}({args})"]
