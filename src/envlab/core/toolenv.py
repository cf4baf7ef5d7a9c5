"""``ToolEnv``: an episode whose tools are methods, checked against their own schemas."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from envlab.core.environment import Environment
from envlab.core.errors import EpisodeOrderError, ToolCallError
from envlab.core.rubric import Reward, Rubric
from envlab.core.tool_budget import ToolBudget, ToolOverrun, ToolRunner
from envlab.core.tools import ToolSpec, collect_tools
from envlab.core.types import Action, Observation, StepResult, Task, ToolCall, ToolResult

if TYPE_CHECKING:
    from envlab.core.limits import Limits
    from envlab.core.spec import EnvSpec


@dataclass(frozen=True, slots=True)
class GradingContext:
    """What rubric components see: the task, the agent's final answer, the final state and
    every tool call of the episode; never the live environment."""

    task: Task
    final_answer: str | None
    state: dict[str, Any] = field(default_factory=dict)
    tool_log: tuple[dict[str, Any], ...] = ()


ToolInterceptor = Callable[["ToolEnv", ToolCall, str], Awaitable[ToolResult]]
"""``(env, call, call_id) -> result``: set as ``ToolEnv.interceptor`` (by a wrapper, before
``reset``), it sees every tool call of the episode; it runs the call with
``env.run_tool(call, call_id)`` or answers it itself with ``env.refuse_call(...)``."""

RETRYABLE_MARK = "[retryable]"
"""In an error result: the call was not run and may be sent again unchanged (a transient
failure, a rate limit, a timeout). Perturbations write it; agents that retry look for it."""

TRUNCATED_MARK = "[output truncated"
"""At the end of a result cut short (``truncate``): what the agent read is not all there was;
a read may be sent again for the whole answer."""


def _snapshot(kwargs: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of parsed arguments that a tool cannot change (nested lists and dicts copied).

    Arguments nested too deep to copy (a tool whose schema let them through) are the agent's
    malformed call: ``ToolCallError``, never a crash of the step."""
    if not any(isinstance(v, dict | list) for v in kwargs.values()):
        return dict(kwargs)
    try:
        return copy.deepcopy(kwargs)
    except RecursionError:
        raise ToolCallError(
            f"arguments for tool '{name}' are nested too deeply to read; send a flat JSON object"
        ) from None


log = logging.getLogger("envlab.tools")
_AFTER_TOOLS = "__envlab_after_tools__"
_Close = Callable[["ToolEnv"], Coroutine[Any, Any, None]]


def _after_tools(close: _Close) -> _Close:
    """A subclass's ``close``, run only once no tool thread is inside the episode: releasing
    what a thread still uses (closing the SQLite connection it is querying) crashes the
    process. It waits ``close_grace_s``, then leaves the close to the thread's end."""

    @functools.wraps(close)
    async def after_tools(self: ToolEnv) -> None:
        if await self._runner.settled(self.close_grace_s):
            await close(self)
            return
        log.warning(
            "%s: a tool thread is still inside the episode after %gs; closing when it ends",
            type(self).__name__,
            self.close_grace_s,
        )
        self._runner.after_thread(functools.partial(close, self))

    setattr(after_tools, _AFTER_TOOLS, True)
    return after_tools


class ToolEnv(Environment):
    """One episode of a chat environment with tools.

    Each step either calls tools (methods marked ``@tool``) or, with no tool calls, gives the
    final answer, which ends the episode. Steps reward 0: the episode's reward comes from
    ``grade()``, which scores ``rubric`` on a ``GradingContext`` after the agent stopped.
    A malformed call (unknown tool, arguments that are not JSON, wrong types, missing
    arguments) is answered with an error the agent can read; the episode goes on and
    ``info["tool_errors"]`` counts it. A tool may raise ``ToolCallError`` for the same effect;
    any other exception is the environment's failure (``env_error``). Arguments are decoded
    here, once, from what the agent sent.

    Sync tools run off the event loop, one call after another, each within the task's
    ``Limits.tool_call_s`` and ``tool_cpu_s`` (``core.tool_budget``): a slow tool delays its own
    episode only. A call over budget is the agent's failure: it is answered with an error, the
    episode ends there and is graded 0 without reading its state (``tool_overrun``), since the
    thread may still be running inside the episode; later calls are refused. Async tools are
    the author's own coroutines and run on the loop as written (their awaits bound nothing:
    heavy work belongs in a sync tool).

    Subclasses set ``rubric`` and may override ``prompt``, ``on_reset`` and ``state``.
    """

    rubric: ClassVar[Rubric]
    _tool_specs: ClassVar[dict[str, ToolSpec]] = {}
    interceptor: ToolInterceptor | None = None
    offered_tools: frozenset[str] | None = None
    """Per-episode tools: set it in ``on_reset`` to offer this episode only these of the class's
    ``@tool`` methods (the agent sees only them; a call of another is an unknown tool)."""
    episode_limits: Limits | None = None
    """The episode's limits, set by the engine before ``reset`` (the user's overrides over the
    task's); without them the spec's own (``spec.limits(task)``) bound the tool calls."""
    """What every tool call goes through when set (perturbations: ``envlab.envs.perturb``)."""

    close_grace_s: ClassVar[float] = 5.0
    """How long ``close`` waits for a tool thread still inside the episode (one over budget,
    in a C call) before leaving the close to run when that thread ends."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._tool_specs = collect_tools(cls)
        close = cls.__dict__.get("close")
        if close is not None and not getattr(close, _AFTER_TOOLS, False):
            cls.close = _after_tools(close)  # type: ignore[method-assign]

    def __init__(self, spec: EnvSpec | None = None) -> None:
        self.spec = spec
        self.task: Task | None = None
        self.seed: int | None = None
        self.final_answer: str | None = None
        self.done = False
        self.n_steps = 0
        self.tool_log: list[dict[str, Any]] = []
        self.tool_overrun: str | None = None
        """Why a tool call ran past its budget, if one did (the episode ended there)."""
        self._reward: Reward | None = None
        self._runner = ToolRunner()

    # --- hooks for subclasses ----------------------------------------------------------------
    def prompt(self, task: Task) -> str:
        return task.prompt

    async def on_reset(self, task: Task, seed: int | None) -> None:
        """Prepare per-episode state."""
        return None

    # --- the contract -------------------------------------------------------------------------
    @property
    def tools(self) -> list[ToolSpec]:
        return list(self._offered().values())

    def _offered(self) -> dict[str, ToolSpec]:
        if self.offered_tools is None:
            return self._tool_specs
        return {n: s for n, s in self._tool_specs.items() if n in self.offered_tools}

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        if self.task is not None:
            raise EpisodeOrderError(
                "reset() called twice: an environment serves one episode; ask the spec for a "
                "fresh one (spec.new_episode())"
            )
        self.task, self.seed = task, seed
        limits = self.episode_limits  # the engine's, else the spec's own
        if limits is None and self.spec is not None:
            limits = self.spec.limits(task)
        if limits is not None:
            self._runner.budget = ToolBudget.of(limits)
        await self.on_reset(task, seed)
        return Observation(text=self.prompt(task))

    async def step(self, action: Action) -> StepResult:
        if self.task is None:
            raise EpisodeOrderError("step() called before reset(); call reset(task) first")
        if self.done:
            raise EpisodeOrderError(
                "step() called after the episode ended; start a new episode from the spec"
            )
        self.n_steps += 1
        if not action.tool_calls:
            self.final_answer = action.text
            self.done = True
            return StepResult(Observation(), 0.0, done=True)
        results: list[ToolResult] = []
        errors = 0
        for i, call in enumerate(action.tool_calls):
            result = await self.call_tool(call, default_id=f"call_{self.n_steps}_{i}")
            errors += result.is_error
            results.append(result)
            if self.done:
                break
        info: dict[str, Any] = {"tool_errors": errors}
        if self.tool_overrun is not None:
            info["tool_overrun"] = self.tool_overrun
        return StepResult(Observation(tool_results=results), 0.0, done=self.done, info=info)

    def call_tool(self, call: ToolCall, default_id: str = "") -> Awaitable[ToolResult]:
        """Answer one call: through ``interceptor`` when one is set, else ``run_tool``."""
        if self.interceptor is not None:
            return self.interceptor(self, call, call.id or default_id)
        return self.run_tool(call, default_id)

    def refuse_call(self, call: ToolCall, call_id: str, message: str) -> ToolResult:
        """Answer ``call`` with the error ``message`` without running the tool, logged as a
        refused call (with its arguments when they parse)."""
        entry: dict[str, Any] = {"name": call.name, "error": message}
        spec = self._tool_specs.get(call.name)
        if spec is not None:
            with contextlib.suppress(ToolCallError):  # arguments that do not parse: none
                entry["arguments"] = _snapshot(spec.parse_arguments(call.arguments), call.name)
        self.tool_log.append(entry)
        return ToolResult(call_id, call.name, f"Error: {message}", is_error=True)

    async def run_tool(self, call: ToolCall, default_id: str = "") -> ToolResult:
        """Run the tool ``call`` names, with its arguments checked against the schema."""
        call_id = call.id or default_id
        offered = self._offered()
        spec = offered.get(call.name)
        sent: dict[str, Any] | None = None
        try:
            if spec is None:
                known = ", ".join(offered) or "(none)"
                raise ToolCallError(f"unknown tool '{call.name}'. Available tools: {known}")
            kwargs = spec.parse_arguments(call.arguments)
            # the record holds what was sent, even if the tool edits it
            sent = _snapshot(kwargs, call.name)
            value = await self._invoke(call.name, getattr(self, spec.attr), kwargs)
        except ToolCallError as e:  # refused by the schema (no arguments), or by the tool
            entry = {"name": call.name, "error": str(e)}
            self.tool_log.append(entry if sent is None else {**entry, "arguments": sent})
            return ToolResult(call_id, call.name, f"Error: {e}", is_error=True)
        except ToolOverrun as e:
            return self._overran(call, call_id, sent, str(e))
        content = value if isinstance(value, str) else repr(value)
        self.tool_log.append({"name": call.name, "arguments": sent, "result": content})
        return ToolResult(call_id, call.name, content)

    async def _invoke(self, name: str, method: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        """The tool's value: an async tool awaited here, a sync one in a worker thread within
        the budget, one call of the episode at a time, in order."""
        if self.tool_overrun is not None:
            raise ToolCallError(f"'{name}' was not run: {self.tool_overrun}")
        if inspect.iscoroutinefunction(method):
            return await method(**kwargs)
        try:
            value = await self._runner.run(functools.partial(method, **kwargs))
        except asyncio.CancelledError:  # its thread may run on: nothing of it is graded
            self.tool_overrun = f"the call of '{name}' was cancelled while it ran"
            raise
        return await value if inspect.isawaitable(value) else value

    def _overran(
        self, call: ToolCall, call_id: str, sent: dict[str, Any] | None, why: str
    ) -> ToolResult:
        """Answer a call over its budget: the agent's error, and the end of the episode."""
        message = (
            f"the call of '{call.name}' was stopped: {why}. The episode ends here: a tool call "
            "over its budget is the agent's failure, scored 0"
        )
        self.tool_overrun, self.done = message, True
        entry: dict[str, Any] = {"name": call.name, "error": message, "overrun": True}
        self.tool_log.append(entry if sent is None else {**entry, "arguments": sent})
        return ToolResult(call_id, call.name, f"Error: {message}", is_error=True)

    def grading_context(self) -> GradingContext:
        if self.task is None:
            raise EpisodeOrderError("grade() called before reset(): there is no episode to grade")
        return GradingContext(self.task, self.final_answer, self.state(), tuple(self.tool_log))

    async def grade(self) -> Reward:
        if self._reward is None:
            self._reward = self.overrun_reward() or await self.score()
        return self._reward

    async def regrade(self) -> Reward:
        """Score again on the same final state (no cached result)."""
        return self.overrun_reward() or await self.score()

    async def score(self) -> Reward:
        """The grade of the final state: the rubric on ``grading_context()``. Subclasses that
        grade their own way override this (never ``grade``, which checks the tool budget first)."""
        return await self.rubric.score(self.grading_context())

    def overrun_reward(self) -> Reward | None:
        """0 when a tool call ran past its budget (``tool_overrun``), without reading the state:
        its thread may still be changing it."""
        if self.tool_overrun is None:
            return None
        zeros = {c.name: 0.0 for c in self.rubric.components}
        return Reward(total=0.0, components=zeros, details={"tool_overrun": self.tool_overrun})

    def state(self) -> dict[str, Any]:
        return {
            "task_id": self.task.id if self.task else None,
            "n_steps": self.n_steps,
            "done": self.done,
            "final_answer": self.final_answer,
            "tool_calls": len(self.tool_log),
        }
