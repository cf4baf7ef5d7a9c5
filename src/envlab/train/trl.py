"""envlab environments in TRL's ``GRPOTrainer`` (written against trl 1.16.0, pinned by the
``train`` extra): the two ways TRL runs an environment.

- ``environment_class(spec)``: a class for ``environment_factory=``. Each instance serves
  one rollout at a time: ``reset(**row)`` starts a fresh envlab episode of the row's task
  (through the engine's limit wrappers), its public methods are the environment's tools (the
  signatures and docstrings TRL reads are made from the envlab ``ToolSpec``), and
  ``get_reward()`` is the episode's valid grade from its rubric, or ``None`` when the episode
  is not scored (an environment or infrastructure failure), which TRL leaves out of the group's
  baseline and trains with advantage 0. TRL never hands the model's final message to the
  environment, so pass ``final_answer`` first in ``reward_funcs``: it gives each episode its
  final answer (and scores nothing itself) before TRL calls ``get_reward``.
- ``EnvlabRollout(spec, tasks, ...)``: a ``rollout_func=``. It runs each row as an envlab
  episode through the rollout engine (``run_episodes``: limits, timeouts, retries, grading)
  with the trainer's own model as the agent (``envlab.train.policy``), and returns each
  trajectory's token view (``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` = the
  loss mask) and its reward (``envlab_reward``; pass ``rollout.reward`` in ``reward_funcs``).
- ``task_dataset(spec, tasks)``: the rows both read: a conversational ``prompt`` and the
  ``task_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal, TypeVar

from envlab.core import Action, ConfigError, EnvSpec, InfraError, Task, ToolCall
from envlab.core.toolenv import ToolEnv
from envlab.core.tools import ToolSpec
from envlab.train.rollout_func import EnvlabRollout
from envlab.train.tasks import TASK_KEY, task_dataset, task_index, task_messages

TRL_VERSION = "1.16.0"
"""The TRL release this module was written and tested against (the ``train`` extra pins it)."""

__all__ = [
    "TASK_KEY",
    "TRL_VERSION",
    "EnvlabEnvironment",
    "EnvlabRollout",
    "environment_class",
    "final_answer",
    "task_dataset",
    "task_messages",
]
_T = TypeVar("_T")
_loop: asyncio.AbstractEventLoop | None = None
_loop_guard = threading.Lock()


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on envlab's own event loop (a daemon thread) and wait for it: TRL calls
    ``reset``, the tools and ``get_reward`` synchronously."""
    global _loop
    with _loop_guard:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="envlab-trl", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result()


# --- environment_factory ----------------------------------------------------------------------
_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict[str, Any],
}


def _hint(schema: dict[str, Any]) -> Any:
    """The Python type whose JSON schema (as ``transformers.get_json_schema`` writes it) is
    closest to ``schema``; nested object properties are not expressible and become ``dict``."""
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]  # type: ignore[misc]
    kind = schema.get("type")
    if kind == "array":
        return list[_hint(schema.get("items", {}))]  # type: ignore[misc]
    if isinstance(kind, list):  # ["string", "null"]
        hints = [_hint({"type": k}) for k in kind if k != "null"]
        base = hints[0] if hints else Any
        return base | None if "null" in kind else base
    if "anyOf" in schema:
        opts = [_hint(s) for s in schema["anyOf"] if s.get("type") != "null"]
        base = opts[0] if opts else Any
        return base | None if len(opts) < len(schema["anyOf"]) else base
    return _JSON_TYPES.get(kind or "", Any)


def _docstring(spec: ToolSpec) -> str:
    """Google style, as TRL (``transformers.get_json_schema``) parses it."""
    props = spec.parameters.get("properties", {})
    lines = [spec.description.strip() or spec.name]
    if props:
        lines += ["", "Args:"]
        for name, p in props.items():
            desc = " ".join(str(p.get("description") or name).split())
            lines.append(f"    {name}: {desc}")
    return "\n".join(lines)


def _tool_method(spec: ToolSpec) -> Callable[..., str]:
    props = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    for name, p in props.items():
        hints[name] = _hint(p)
        default = inspect.Parameter.empty if name in required else p.get("default")
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[name]
            )
        )
    hints["return"] = str

    def method(self: Any, **kwargs: Any) -> str:
        return self._call_tool(spec.name, kwargs)  # type: ignore[no-any-return]

    method.__name__ = method.__qualname__ = spec.name
    method.__doc__ = _docstring(spec)
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = hints
    return method


class EnvlabEnvironment:
    """The base of the classes ``environment_class`` makes (TRL's ``environment_factory``).

    Only ``reset``, ``get_reward`` and the tools are public: TRL exposes every other public
    method to the model as a tool."""

    spec: EnvSpec
    tasks: dict[str, Task]
    seed: int = 0

    def __init__(self) -> None:
        self._env: Any = None
        self._task: Task | None = None
        self._resets = 0
        self._clear()

    def _clear(self) -> None:
        self._status = "ok"  # ok | truncated | env_error | infra_error
        self._error: str | None = None
        self._ended = False
        self._answered = False
        self._step_rewards = 0.0

    def reset(
        self, task_id: str, prompt: list[dict[str, Any]] | None = None, **row: Any
    ) -> str | None:
        """Start a fresh episode of task ``task_id``; returns what TRL appends to the user turn."""
        from envlab.rollout.config import wrap_for_limits

        _run(self._close())
        task = self.tasks.get(task_id)
        if task is None:
            raise ConfigError(f"task {task_id!r} is not among this environment's tasks")
        self._clear()
        self._task = task
        self._env = wrap_for_limits(self.spec.new_episode(), self.spec.limits(task))
        self._resets += 1  # the episode seed: deterministic per instance and task
        key = f"{self.seed}:{task_id}:{self._resets}"
        seed = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
        try:
            obs = _run(self._env.reset(task, seed))
        except Exception as e:  # the environment failed, not the agent: unscored
            self._fail("infra_error" if isinstance(e, InfraError) else "env_error", e)
            return None
        shown = (prompt or [{}])[-1].get("content") or ""
        if obs.text == shown:
            return None
        if shown:
            raise ConfigError(
                f"task {task_id!r}: the row's prompt is not the episode's first observation; "
                "build the rows with envlab.train.trl.task_dataset(spec, tasks)"
            )
        return obs.text or None

    def _fail(self, status: str, e: BaseException) -> None:
        self._status, self._error, self._ended = status, f"{type(e).__name__}: {e}", True

    def _step(self, action: Action) -> Any:
        try:
            result = _run(self._env.step(action))
        except Exception as e:
            self._fail("infra_error" if isinstance(e, InfraError) else "env_error", e)
            return None
        self._step_rewards += result.reward
        if result.done or result.truncated:
            self._ended = True
            self._status = "truncated" if result.truncated and not result.done else "ok"
        return result

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self._env is None:
            raise ConfigError("a tool was called before reset(); TRL calls reset(**row) first")
        if self._ended:
            return f"Error: the episode has ended ({self._status}); no more tool calls are taken"
        result = self._step(Action(tool_calls=[ToolCall(name, arguments)]))
        if result is None:
            return f"Error: the environment failed: {self._error}"
        return "\n".join(r.content for r in result.observation.tool_results)

    def _give_answer(self, text: str | None) -> None:
        """The model's final message (``None``: it ended on a tool call, cut by TRL's limits)."""
        self._answered = True
        if self._env is not None and not self._ended and text is not None:
            self._step(Action(text=text))

    def get_reward(self) -> float | None:
        """The episode's valid grade (the rubric's total, in [0, 1]); ``None`` if unscored."""
        if self._env is None:
            raise ConfigError("get_reward() called before reset()")
        if not self._answered:
            raise ConfigError(
                "the episode never got the model's final message: pass "
                "reward_funcs=[envlab.train.trl.final_answer] to GRPOTrainer (TRL calls "
                "get_reward() after the reward functions)"
            )
        if self._status in ("env_error", "infra_error"):
            return None
        return _run(self._grade())

    async def _grade(self) -> float | None:
        from envlab.rollout.grading import grade_episode

        assert self._task is not None
        me = asyncio.current_task()
        assert me is not None
        try:
            reward, _ = await grade_episode(
                self._env,
                self._task,
                self._step_rewards,
                self.spec.limits(self._task).grade_timeout_s,
                me,
            )
        except InfraError as e:
            self._fail("infra_error", e)
            return None
        return float(reward.total)

    async def _close(self) -> None:
        if self._env is not None:
            env, self._env = self._env, None
            with contextlib.suppress(Exception):  # a failed close loses nothing already graded
                await env.close()


def environment_class(spec: EnvSpec, tasks: Sequence[Task] | None = None, *, seed: int = 0) -> type:
    """A class for ``GRPOTrainer(environment_factory=...)`` over ``spec``'s tool episodes.

    ``tasks``: the tasks the rows name (default ``spec.tasks(seed=seed)``)."""
    episode = spec.environment
    if not (isinstance(episode, type) and issubclass(episode, ToolEnv)):
        raise ConfigError(
            f"{spec.name}: environment_class needs an EnvSpec whose episodes are ToolEnv"
        )
    members: dict[str, Any] = {}
    for name, tool in episode._tool_specs.items():
        if (
            name in ("reset", "get_reward")
            or name.startswith("_")
            or hasattr(EnvlabEnvironment, name)
        ):
            raise ConfigError(f"{spec.name}: tool {name!r} clashes with the TRL adapter's methods")
        members[name] = _tool_method(tool)
    members.update(
        spec=spec,
        tasks=task_index(list(tasks) if tasks is not None else list(spec.tasks(seed=seed))),
        seed=seed,
        __doc__=f"{spec.name} for TRL: reset(**row), its tools, get_reward().",
    )
    name = "".join(p.capitalize() for p in spec.id.replace("-", "_").split("_")) + "Env"
    return type(name, (EnvlabEnvironment,), members)


def _final_text(completion: Any) -> str | None:
    if isinstance(completion, str):
        return completion
    last = completion[-1] if completion else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return str(last.get("content") or "")


def final_answer(
    completions: list[Any], environments: list[Any] | None = None, **_: Any
) -> list[float | None]:
    """A reward function that scores nothing (``None``: left out by TRL): it hands each
    rollout's final message to its envlab episode, so that ``get_reward`` grades the answer."""
    for completion, env in zip(completions, environments or [], strict=False):
        if isinstance(env, EnvlabEnvironment):
            env._give_answer(_final_text(completion))
    return [None] * len(completions)
