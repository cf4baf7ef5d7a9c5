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

from envlab.core import Action, ConfigError, EnvSpec, InfraError, Task, ToolCall, Trajectory
from envlab.core.toolenv import ToolEnv
from envlab.core.tools import ToolSpec

TRL_VERSION = "1.16.0"
TASK_KEY = "envlab_task"
"""The key of the user message of a row's ``prompt`` that names its task (chat templates
ignore it): ``rollout_func`` receives only the prompts, and needs to know their tasks."""

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


# --- the dataset ------------------------------------------------------------------------------
def _opening(spec: EnvSpec, task: Task) -> str:
    """The first user message when it is the task's prompt (a ``ToolEnv`` that does not
    override ``prompt``); otherwise ``""``, and ``reset`` supplies it (e.g. a simulated user's
    opening line: never the task's hidden instruction)."""
    cls = spec.environment
    if isinstance(cls, type) and issubclass(cls, ToolEnv) and cls.prompt is ToolEnv.prompt:
        return task.prompt
    return ""


def task_messages(spec: EnvSpec, task: Task) -> list[dict[str, Any]]:
    """The conversational prompt of ``task``: the episode's system prompt, then the user turn
    (its ``TASK_KEY`` names the task)."""
    system = spec.new_episode().system_prompt()
    user = {"role": "user", "content": _opening(spec, task), TASK_KEY: task.id}
    if system:
        return [{"role": "system", "content": system, TASK_KEY: None}, user]
    return [user]


def task_dataset(spec: EnvSpec, tasks: Sequence[Task]) -> Any:
    """A ``datasets.Dataset`` of ``tasks``: ``prompt`` (conversational) and ``task_id``."""
    from datasets import Dataset

    rows = [{"prompt": task_messages(spec, t), "task_id": t.id} for t in tasks]
    return Dataset.from_list(rows)


def _task_index(tasks: Sequence[Task]) -> dict[str, Task]:
    index: dict[str, Task] = {}
    for t in tasks:
        if t.id in index:
            raise ConfigError(f"two tasks share the id {t.id!r}: task ids must be unique")
        index[t.id] = t
    return index


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
        seed = int(hashlib.sha256(f"{self.seed}:{task_id}:{id(self)}".encode()).hexdigest()[:8], 16)
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
        tasks=_task_index(list(tasks) if tasks is not None else list(spec.tasks(seed=seed))),
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


# --- rollout_func -----------------------------------------------------------------------------
def _group_of(prompts: list[Any]) -> list[int]:
    """Sample index of each row: TRL repeats each prompt num_generations times, consecutively."""
    out: list[int] = []
    for i, p in enumerate(prompts):
        out.append(out[-1] + 1 if i and p == prompts[i - 1] else 0)
    return out


class EnvlabRollout:
    """``GRPOTrainer(rollout_func=EnvlabRollout(spec, tasks), reward_funcs=[rollout.reward])``."""

    def __init__(
        self,
        spec: EnvSpec,
        tasks: Sequence[Task],
        *,
        seed: int = 0,
        temperature: float = 1.0,
        max_turns: int = 8,
        max_tokens_per_turn: int | None = None,
        concurrency: int = 4,
        config: Any = None,
        on_trajectories: Callable[[list[Trajectory]], None] | None = None,
    ) -> None:
        self.spec, self.tasks, self.seed = spec, _task_index(tasks), seed
        self.temperature, self.max_turns = temperature, max_turns
        self.max_tokens_per_turn, self.concurrency, self.config = (
            max_tokens_per_turn,
            concurrency,
            config,
        )
        self.on_trajectories = on_trajectories
        self.calls = 0
        self.last: list[Trajectory] = []

    def _task_of(self, prompt: Any) -> Task:
        ids = [m.get(TASK_KEY) for m in prompt if isinstance(m, dict) and m.get(TASK_KEY)]
        if not ids or ids[-1] not in self.tasks:
            raise ConfigError(
                "a prompt names no known task: build the dataset with "
                "envlab.train.trl.task_dataset(spec, tasks) and pass the same tasks here"
            )
        return self.tasks[ids[-1]]

    def agents(self, trainer: Any) -> Any:
        from envlab.train.policy import PolicyAgents

        step = int(trainer.state.global_step)
        budget = int(trainer.max_completion_length)
        return PolicyAgents(
            trainer.model,
            trainer.processing_class,
            model_id=f"{type(trainer.model).__name__}@step{step}",
            temperature=self.temperature,
            max_tokens=self.max_tokens_per_turn or budget,
            max_turns=self.max_turns,
            max_episode_tokens=budget,
        )

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from envlab.rollout import PlannedEpisode, episode_ids_in_group, run_episodes

        agents = self.agents(trainer)
        env_hash = self.spec.content_hash()
        samples = _group_of(prompts)
        plan = []
        for i, (prompt, sample) in enumerate(zip(prompts, samples, strict=True)):
            task = self._task_of(prompt)
            key = (
                f"{self.spec.name}\0{env_hash}\0{task.id}\0{self.seed}\0{self.calls}\0{i - sample}"
            )
            group = hashlib.sha256(key.encode()).hexdigest()[:16]
            step = int(trainer.state.global_step)
            info = {"trainer_step": step, "policy_version": step}
            plan.append(
                PlannedEpisode(task, sample, episode_ids_in_group(group, sample), agents, info=info)
            )
        self.calls += 1
        trajs = asyncio.run(
            run_episodes(self.spec, plan, config=self.config, concurrency=self.concurrency)
        )
        self.last = trajs
        if self.on_trajectories is not None:
            self.on_trajectories(trajs)
        return _token_fields(trajs, trainer.processing_class)

    @property
    def reward(self) -> Callable[..., list[float | None]]:
        def envlab_reward(
            completions: list[Any], envlab_reward: list[Any], **_: Any
        ) -> list[float | None]:
            """The episodes' valid grades; None for unscored ones (env or infra error)."""
            return list(envlab_reward)

        return envlab_reward


def _token_fields(trajs: list[Trajectory], tokenizer: Any) -> dict[str, list[Any]]:
    """TRL's rollout output: the token view of each trajectory, its reward and status.

    An unscored episode (env or infra error) has reward ``None`` (TRL leaves it out of the
    baseline, advantage 0) and its mask zeroed; an episode without a token view (no model turn
    finished) gets one masked end-of-turn token, and its reward if it was scored."""
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "prompt_ids",
            "completion_ids",
            "logprobs",
            "env_mask",
            "envlab_reward",
            "envlab_status",
        )
    }
    eos = tokenizer.eos_token_id
    for t in trajs:
        tv, scored = t.tokens, t.scored
        if tv is not None and tv.completion_ids:
            prompt, completion = list(tv.prompt_ids), list(tv.completion_ids)
            logprobs = list(tv.logprobs) or [0.0] * len(completion)
            mask = list(tv.loss_mask) if scored else [0] * len(completion)
        else:  # scored still counts in its group's baseline; nothing to train on
            prompt = list(tv.prompt_ids) if tv is not None and tv.prompt_ids else [eos]
            completion, logprobs, mask = [eos], [0.0], [0]
        out["prompt_ids"].append(prompt)
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask)
        out["envlab_reward"].append(float(t.reward) if scored and t.reward is not None else None)
        out["envlab_status"].append(str(t.status))
    return out
