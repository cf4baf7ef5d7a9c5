"""The verifiers side of the ``vf:`` adapter: loading an environment as verifiers loads it,
recording an episode as a verifiers ``Trace`` and scoring it with verifiers' own code.

Nothing here re-implements verifiers: the environment comes from
``verifiers.v1.load_environment`` (the taskset package imported by id, as ``vf-eval`` does),
each assistant turn is committed to the trace with ``verifiers.v1.graph.prepare_turn(...)
.commit(Response)`` (what verifiers' interception does per model call), and the reward is
``Task.score(trace)`` (the task's ``@vf.reward`` methods, plugged rewards and judges, weighted
and summed by verifiers into ``trace.reward``).
"""

from __future__ import annotations

import inspect
import time
import uuid
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from envlab.core import ConfigError, GraderFailed

MIN_VERSION = "0.4"


def import_verifiers() -> ModuleType:
    """``verifiers.v1``, or a ``ConfigError`` saying how to install it."""
    try:
        import verifiers
        import verifiers.v1 as vf
    except ImportError as e:
        raise ConfigError(
            f"vf:NAME environments need verifiers 0.4 ({e}); it conflicts with envlab's dev "
            "set (mcp, openai pins), so install it in its own environment: "
            "pip install 'envlab[verifiers]' (docs/adapters/verifiers.md)"
        ) from None
    if not verifiers.__version__.startswith(MIN_VERSION):
        raise ConfigError(
            f"vf:NAME environments are written for verifiers {MIN_VERSION}.x (its v1 API); "
            f"this is verifiers {verifiers.__version__}"
        )
    return vf


def load_vf_env(taskset_id: str, taskset_args: dict[str, Any]) -> Any:
    """The verifiers ``Env`` for ``taskset_id``, built as verifiers builds it for a run:
    ``resolve_env_config`` then ``load_environment`` (taskset package imported by id)."""
    vf = import_verifiers()
    try:
        config = vf.resolve_env_config({"taskset": {"id": taskset_id, **taskset_args}})
        return vf.load_environment(config)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(
            f"verifiers environment {taskset_id!r} needs configuration ({problems}): pass its "
            "taskset's fields as taskset_args={...}"
        ) from None
    except ModuleNotFoundError as e:
        raise ConfigError(
            f"verifiers has no environment {taskset_id!r}: {e}. Install the taskset package "
            "(pip install NAME) in the verifiers environment; `python -m "
            "envlab.adapters.verifiers` lists the ones found"
        ) from None


def runtime_signals(task: Any) -> list[str]:
    """Rewards, metrics and judges of ``task`` that need a live runtime (a sandbox verifiers
    would provision): scored without one, verifiers would skip them, changing the reward."""
    needs: list[str] = []

    def requires_runtime(fn: Any) -> bool:
        param = inspect.signature(fn).parameters.get("runtime")
        return param is not None and param.default is inspect.Parameter.empty

    for fn in (*task.hooks("reward"), *task.hooks("metric")):
        if requires_runtime(fn):
            needs.append(fn.__name__)
    for judge in task.plugged_judges():
        if requires_runtime(judge.score):
            needs.append(judge.reward_name)
    return needs


def reward_range(task: Any) -> tuple[float, float]:
    """The range of ``trace.reward`` when every signal scores in [0, 1], as verifiers' own
    rewards and judges do: verifiers sums ``score * weight`` (weights from ``@vf.reward``, the
    config's plugged rewards and each judge's ``weight``)."""
    weights = [getattr(fn, "_vf_weight", 1.0) for fn in task.hooks("reward")]
    weights += [judge.config.weight for judge in task.plugged_judges()]
    low = sum(w for w in weights if w < 0)
    high = sum(w for w in weights if w > 0)
    return float(low), float(high)


def as_vf_messages(prompt: Any, system_prompt: str | None) -> list[Any]:
    """The conversation a verifiers harness opens with: the task's system prompt (as a
    system message, as the null/chat harness sends it) then its prompt."""
    vf = import_verifiers()
    messages: list[Any] = []
    if system_prompt:
        messages.append(vf.SystemMessage(content=system_prompt))
    if isinstance(prompt, str):
        messages.append(vf.UserMessage(content=prompt))
    elif prompt:
        messages.extend(prompt)
    return messages


@dataclass
class VfTranscript:
    """One episode as verifiers records it: the trace, built turn by turn."""

    task: Any
    trace: Any
    messages: list[Any] = field(default_factory=list)

    @classmethod
    def start(cls, task: Any) -> VfTranscript:
        vf = import_verifiers()
        from verifiers.v1.state import state_cls

        trace = vf.Trace(
            task=vf.TraceTask(
                type=type(task).__name__, data=task.data, key=task.key, hash=task.hash
            ),
            state=state_cls(type(task))(),
            agent=vf.AgentInfo(config=vf.AgentConfig(), name="envlab", trainable=False),
        )
        return cls(task, trace, as_vf_messages(task.data.prompt, task.data.system_prompt))

    def reply(self, text: str, model: str = "envlab-agent") -> None:
        """Commit one assistant turn, as verifiers' interception commits a model call."""
        vf = import_verifiers()
        from verifiers.v1.graph import prepare_turn

        message = vf.AssistantMessage(content=text)
        response = vf.Response(
            id=uuid.uuid4().hex,
            created=int(time.time()),
            model=model,
            message=message,
            finish_reason="stop",
        )
        prepare_turn(self.trace, list(self.messages)).commit(response)
        self.messages.append(message)


async def score_trace(task: Any, trace: Any) -> tuple[float, dict[str, float], dict[str, Any]]:
    """Verifiers' own scoring of ``trace``: ``Task.score`` then ``trace.reward`` (the weighted
    sum); also the named weighted values and the raw scores, weights and metrics."""
    try:
        await task.score(trace)
    except Exception as e:  # a TaskError from verifiers' scoring boundary
        raise GraderFailed(f"verifiers scoring failed: {type(e).__name__}: {e}") from e
    missing = [name for name, r in trace.rewards.items() if r is None]
    if missing:
        raise GraderFailed(f"verifiers recorded no score for {missing} (scoring did not run)")
    components = {name: r.value for name, r in trace.rewards.items()}
    details = {
        "scores": {name: r.score for name, r in trace.rewards.items()},
        "weights": {name: r.weight for name, r in trace.rewards.items()},
        "metrics": dict(trace.metrics),
    }
    return float(trace.reward), components, details
