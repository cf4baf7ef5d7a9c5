"""verifiers environments as envlab environments: ``envlab eval vf:TASKSET``.

``vf:NAME`` is the verifiers 0.4 environment whose taskset id is ``NAME`` (an installed
package exporting a ``vf.Taskset`` subclass, or a taskset built into verifiers), loaded as
verifiers loads it for ``vf-eval`` (``verifiers.v1.load_environment``). The tasks are the
taskset's own; envlab drives the episode (the agent answers the task's prompt, one turn, as
verifiers' chat harness does without tools); the reward is the task's own scoring
(``Task.score``: ``@vf.reward`` methods, plugged rewards, judges) on the episode recorded as a
verifiers ``Trace``, run by verifiers' code (``verifiers_scoring``). verifiers sums
``score * weight``; with weights that do not sum to 1 the task declares the range
``[sum of negative weights, sum of positive weights]`` and envlab normalises it to [0, 1]
(docs/adapters/verifiers.md).

``catalog()`` lists every verifiers environment found here, loaded or failed with the reason.
"""

from __future__ import annotations

import importlib.metadata
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envlab.adapters.catalog import CatalogEntry
from envlab.adapters.verifiers_scoring import (
    VfTranscript,
    import_verifiers,
    load_vf_env,
    reward_range,
    runtime_signals,
    score_trace,
)
from envlab.core import (
    Action,
    ConfigError,
    Environment,
    EnvSpec,
    EpisodeOrderError,
    GraderFailed,
    Limits,
    Observation,
    Reward,
    StepResult,
    Task,
    TaskSet,
)

PREFIX = "vf:"
ANSWER_FIELDS = ("answer", "reference", "solution", "target")
"""Task-data fields read as the hidden reference answer (``Task.answer``), first found."""


class VerifiersConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    taskset: str
    """The verifiers taskset id (``vf-eval TASKSET``): an installed package or a built-in."""
    taskset_args: dict[str, Any] = Field(default_factory=dict)
    """Fields of the taskset's own config (``--env.taskset.*`` in verifiers)."""
    size: int | None = Field(None, ge=1)
    """At most this many tasks (the taskset's first, or shuffled by ``seed``); all if unset."""
    judge_model: str | None = None
    """``openai:MODEL@URL``: the endpoint every plugged judge calls (else a task with a
    model judge is refused: it cannot be scored offline)."""


def parse_judge_model(value: str) -> tuple[str, str]:
    """``openai:MODEL@URL`` as ``(MODEL, URL)``."""
    provider, _, rest = value.partition(":")
    model, _, url = rest.rpartition("@")
    if provider != "openai" or not model or not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"judge_model={value!r}: write it as openai:MODEL@URL (an OpenAI-compatible "
            "endpoint, e.g. openai:qwen2.5-7b@http://localhost:8000/v1)"
        )
    return model, url


class VerifiersEpisode(Environment):
    """One episode: ``reset`` shows the task's prompt, the agent's reply ends it, ``grade``
    runs verifiers' own scoring on the reply recorded as a verifiers trace."""

    def __init__(self, spec: VerifiersEnv) -> None:
        self.spec = spec
        self.task: Task | None = None
        self.transcript: VfTranscript | None = None
        self.replies: list[str] = []

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        if self.task is not None:
            raise EpisodeOrderError("reset() called twice: ask the spec for a fresh episode")
        self.task = task
        self.transcript = VfTranscript.start(self.spec.vf_task(task))
        return Observation(text=task.prompt)

    async def step(self, action: Action) -> StepResult:
        if self.transcript is None:
            raise EpisodeOrderError("step() called before reset(); call reset(task) first")
        if self.replies:
            raise EpisodeOrderError("step() called after the episode ended (one reply)")
        self.replies.append(action.text)
        self.transcript.reply(action.text)
        return StepResult(Observation(text=""), 0.0, done=True)

    async def grade(self) -> Reward:
        if self.task is None:
            raise EpisodeOrderError("grade() called before reset(): there is no episode")
        transcript = VfTranscript.start(self.spec.vf_task(self.task))  # fresh: a regrade too
        for text in self.replies:
            transcript.reply(text)
        total, components, details = await score_trace(transcript.task, transcript.trace)
        details["raw_reward"] = total
        return Reward(total=total, components=components, details=details)

    async def regrade(self) -> Reward:
        return await self.grade()

    def state(self) -> dict[str, Any]:
        return {"replies": list(self.replies)}

    def system_prompt(self) -> str | None:
        if self.task is None:
            return None
        return self.spec.vf_task(self.task).data.system_prompt

    def oracle_actions(self, task: Task) -> list[Action]:
        """verifiers' conventional answer format (``\\boxed{}``, read by its
        ``extract_boxed_answer``) around the task data's reference answer; none without one."""
        if task.answer is None:
            return []
        return [Action(text=f"\\boxed{{{task.answer}}}")]


class VerifiersEnv(EnvSpec):
    """verifiers environments: ``vf:TASKSET`` (``--env-arg taskset=TASKSET``)."""

    id = "verifiers"
    description = "verifiers 0.4 environments (vf:TASKSET), scored by their own rewards."
    Config = VerifiersConfig
    environment = VerifiersEpisode
    default_limits = Limits(max_steps=1, step_timeout_s=300.0, episode_timeout_s=600.0)
    config: VerifiersConfig

    def __init__(self, config: Any = None, **values: Any) -> None:
        super().__init__(config, **values)
        import_verifiers()
        self.vf_env = load_vf_env(self.config.taskset, dict(self.config.taskset_args))
        self._tasks: list[Any] = self._load_tasks()
        self._by_id = {self._task_id(t): t for t in self._tasks}

    @property
    def name(self) -> str:
        return PREFIX + self.config.taskset

    def _load_tasks(self) -> list[Any]:
        taskset = self.vf_env.taskset
        if not taskset.bounded and self.config.size is None:
            raise ConfigError(f"{self.name} is an infinite taskset: set size=N")
        view = taskset.take(self.config.size) if self.config.size else taskset
        tasks = [self._with_judge(t) for t in view]
        for task in tasks:
            self._check_offline(task)
        return tasks

    def _with_judge(self, task: Any) -> Any:
        if not task.config.judges or self.config.judge_model is None:
            return task
        model, url = parse_judge_model(self.config.judge_model)
        judges = [
            j.model_copy(update={"model": model, "base_url": url}) for j in task.config.judges
        ]
        task.config = task.config.model_copy(update={"judges": judges})
        return task

    def _check_offline(self, task: Any) -> None:
        """Refuse what envlab cannot score faithfully: model judges without an endpoint,
        signals that need a sandbox runtime, tool servers."""
        if task.config.judges and self.config.judge_model is None:
            names = [f"{j.id} (model {j.model} at {j.base_url})" for j in task.config.judges]
            raise ConfigError(
                f"{self.name}: task {self._task_id(task)!r} is scored by model judge(s) "
                f"{', '.join(names)}, which cannot run offline; give an endpoint with "
                "judge_model=openai:MODEL@URL"
            )
        if needs := runtime_signals(task):
            raise ConfigError(
                f"{self.name}: rewards/metrics {needs} need a verifiers runtime (a sandbox "
                "verifiers provisions); envlab scores without one and would drop them"
            )
        if type(task).toolsets(task.config) or type(self.vf_env.taskset).toolsets(
            self.vf_env.taskset.config
        ):
            raise ConfigError(f"{self.name}: tasks use MCP tool servers, not supported yet")

    @staticmethod
    def _task_id(task: Any) -> str:
        return str(task.data.id or f"idx{task.data.idx}")

    def vf_task(self, task: Task) -> Any:
        """The verifiers task behind an envlab task."""
        try:
            return self._by_id[task.id]
        except KeyError:
            raise GraderFailed(f"{self.name} has no task {task.id!r}") from None

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        """The taskset's tasks in its order (seed 0) or shuffled by ``seed``; verifiers
        tasksets have no splits, so every split is the same tasks."""
        order = list(self._tasks)
        if seed:
            import random

            random.Random(seed).shuffle(order)
        out = [self._envlab_task(t, split) for t in order[: n if n is not None else None]]
        return TaskSet(out, seed=seed, name=self.name)

    def _envlab_task(self, vf_task: Any, split: str) -> Task:
        data = vf_task.data
        answer = next(
            (getattr(data, f) for f in ANSWER_FIELDS if getattr(data, f, None) is not None), None
        )
        low, high = reward_range(vf_task)
        meta: dict[str, Any] = {"taskset": self.config.taskset, "vf_key": vf_task.key}
        if (low, high) != (0.0, 1.0):
            meta["reward_range"] = [low, high]
        return Task(
            id=self._task_id(vf_task),
            prompt=data.prompt_text,
            answer=answer,
            metadata=meta,
            split=split,
        )


def load_verifiers_env(name: str, **kwargs: Any) -> VerifiersEnv:
    """verifiers environments as vf:TASKSET (an installed taskset package's id)."""
    return VerifiersEnv(taskset=name.removeprefix(PREFIX), **kwargs)


def installed_tasksets() -> list[str]:
    """Taskset ids found here: verifiers' built-in tasksets and every installed
    distribution that depends on verifiers (verifiers imports an environment by its id)."""
    import_verifiers()
    import pkgutil

    from verifiers.v1 import tasksets

    ids = {m.name for m in pkgutil.iter_modules(tasksets.__path__)}
    for dist in importlib.metadata.distributions():
        requires = dist.requires or []
        name = dist.metadata["Name"] or ""
        hard = [r for r in requires if "extra ==" not in r.replace("extra==", "extra ==")]
        if name.lower() != "verifiers" and any(r.lower().startswith("verifiers") for r in hard):
            ids.add(name)
    return sorted(ids)


def catalog() -> list[CatalogEntry]:
    """Every verifiers environment found here, loaded (tasks made) or failed with the reason
    (a data set download, an API key, a model judge, a sandbox runtime, a missing package)."""
    try:
        ids = installed_tasksets()
    except ConfigError as e:
        return [CatalogEntry(name=PREFIX + "*", loaded=False, reason=str(e))]
    return [_try_taskset(taskset) for taskset in ids]


def _try_taskset(taskset: str) -> CatalogEntry:
    t = time.perf_counter()
    try:
        spec = VerifiersEnv(taskset=taskset, size=1)
        spec.tasks(n=1)
    except Exception as e:  # a download, a corpus, an API key, a judge, a runtime
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        return CatalogEntry(
            name=PREFIX + taskset, loaded=False, reason=reason, seconds=time.perf_counter() - t
        )
    return CatalogEntry(
        name=PREFIX + taskset, loaded=True, players=1, seconds=time.perf_counter() - t
    )


if __name__ == "__main__":  # python -m envlab.adapters.verifiers: the catalogue as JSON lines
    for entry in catalog():
        print(entry.model_dump_json())
