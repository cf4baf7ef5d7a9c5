"""The record of one episode, and the spec of the agent that produced it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter
from pydantic_core import PydanticSerializationError

from envlab.core.text import valid_text
from envlab.core.types import Action, Observation


class Status(StrEnum):
    """How an episode ended.

    ``infra_error`` and ``env_error`` are failures of the infrastructure or the environment: they
    are excluded from scores and counted separately; ``timeout`` and ``agent_error`` are
    the agent's.
    """

    OK = "ok"
    TRUNCATED = "truncated"
    TIMEOUT = "timeout"
    AGENT_ERROR = "agent_error"
    ENV_ERROR = "env_error"
    INFRA_ERROR = "infra_error"

    @property
    def scored(self) -> bool:
        return self is not _ENV_ERROR and self is not _INFRA_ERROR


_ENV_ERROR, _INFRA_ERROR = Status.ENV_ERROR, Status.INFRA_ERROR  # members are singletons


class AgentSpec(BaseModel):
    """An agent is a model plus a harness plus operating settings; every result records which."""

    model_config = ConfigDict(frozen=True)

    name: str
    model_id: str | None = None
    endpoint: str | None = None
    weights_hash: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    harness: str = "scripted"
    harness_version: str = "1"
    limits: dict[str, Any] = Field(default_factory=dict)
    privileged: bool = False
    """True for agents that read hidden task data (the oracle): never a measurement of skill."""


@dataclass(slots=True, kw_only=True)
class TokenView:
    """The token view of an episode for trainers, stored once: the first turn's prompt, then
    everything after it as one stream (the model's completions, ``loss_mask`` 1, and the tokens
    the next turns' prompts added, mask 0).

    ``turn_starts[k]`` is where model turn ``k``'s completion starts in
    ``prompt_ids + completion_ids``: that prefix is exactly the prompt the model got for the
    turn, and it re-renders from ``messages`` with the model's chat template.
    """

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)

    def turn_prompt(self, k: int) -> list[int]:
        """The prompt ids model turn ``k`` received."""
        return (self.prompt_ids + self.completion_ids)[: self.turn_starts[k]]


@dataclass(slots=True, kw_only=True)
class StepRecord:
    """One step, in its structured view (parsed from, and beside, the transcript).

    ``action`` is what the environment was given (``text``, ``tool_calls`` with their raw
    argument strings, and in ``action.info`` what the agent reported: usage, finish reason,
    latency, never token ids), ``observation`` what it answered (``text``, ``tool_results``).
    ``message_index`` is the position in ``messages`` of the model reply this step came from
    (``None`` when the agent acted without a model turn, e.g. a harness limit).
    """

    index: int
    message_index: int | None
    action: Action = field(default_factory=Action)
    observation: Observation = field(default_factory=Observation)
    reward: float = 0.0
    tool_errors: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    """What the environment reported for the step."""
    agent_s: float = 0.0
    env_s: float = 0.0


ErrorKind = Literal["timeout", "agent", "model", "env", "infra", "engine", "unknown"]
"""``model``: the agent's model endpoint failed past its retries (``ModelUnavailable``)."""


@dataclass(slots=True, kw_only=True)
class EpisodeError:
    """Why an episode did not end ``ok``: ``kind`` (whose failure), ``phase`` (what was running:
    ``reset``, ``start``, ``act``, ``step``, ``grade``, ``close``, ``engine``) and ``message``
    (what happened, with the last frames of a traceback)."""

    kind: ErrorKind
    phase: str
    message: str

    def headline(self) -> str:
        """The first line of the message."""
        return (self.message.strip().splitlines() or [""])[0]

    def describe(self) -> str:
        """``kind in phase: headline``, the one-line form every table and report shows."""
        return f"{self.kind} in {self.phase}: {self.headline()}"


def _legacy_error(value: Any) -> Any:
    """Runs written before errors were structured stored a string."""
    if isinstance(value, str):
        return {"kind": "unknown", "phase": "unknown", "message": value}
    return value


@dataclass(slots=True, kw_only=True)
class Timings:
    started_at: float = 0.0
    ended_at: float = 0.0
    duration_s: float = 0.0
    agent_s: float = 0.0
    env_s: float = 0.0
    grade_s: float = 0.0
    waited_s: float = 0.0


class EpisodeRecord(NamedTuple):
    """The few numbers of an episode that summaries need.

    A tuple of atoms, which Python's cyclic GC stops tracking: a run keeps one per episode in
    memory instead of whole trajectories (which stay on disk), so long runs neither grow nor slow.
    """

    episode_id: str
    task_id: str
    sample_index: int
    status: str
    reward: float | None
    n_steps: int
    tool_errors: int
    grader_failed: bool = False
    model_failed: bool = False
    """The agent's model endpoint failed (error kind ``model``): scored 0 as the agent's
    failure, or excluded (``infra_error``) when the run excludes model failures."""

    @property
    def scored(self) -> bool:
        return self.reward is not None and self.status not in _UNSCORED


_UNSCORED = frozenset({"env_error", "infra_error"})


@dataclass(slots=True, kw_only=True)
class Trajectory:
    """One episode, as written to ``trajectories.jsonl`` (one JSON object per line).

    A plain dataclass, cheap to build on the engine's hot path; ``to_json``/``from_json`` go
    through a pydantic ``TypeAdapter``, which validates every field when reading a file.
    """

    episode_id: str
    task_id: str
    group_id: str
    sample_index: int
    reward: float | None
    status: Status
    env_id: str
    env_hash: str
    seed: int
    agent: AgentSpec
    components: dict[str, float] = field(default_factory=dict)
    gated_by: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The tools the agent was offered (OpenAI function schemas): with ``messages``, what a
    chat template renders the model's prompts from."""
    steps: list[StepRecord] = field(default_factory=list)
    tokens: TokenView | None = None
    n_steps: int = 0
    tool_errors: int = 0
    attempts: int = 1
    error: Annotated[EpisodeError | None, BeforeValidator(_legacy_error)] = None
    grader_failed: str | None = None
    """Why the grade of the agent's final state was invalid twice (then ``reward`` is 0)."""
    timings: Timings = field(default_factory=Timings)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.status.scored and self.reward is not None

    def to_json(self) -> bytes:
        # a value an environment or agent put in ``info`` that JSON cannot hold (a numpy scalar)
        # is written as its repr rather than losing the episode; text that is not valid Unicode
        # (a lone surrogate, from an environment's or a transcript's strings) is written with
        # U+FFFD in its place rather than losing the episode, or the run
        try:  # the adapter's serializer itself: ``dump_json``'s defaults, without its wrapper
            return _SERIALIZER.to_json(self, fallback=repr)
        except PydanticSerializationError:
            plain = valid_text(_ADAPTER.dump_python(self, mode="json", fallback=repr))
            return json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()

    def record(self) -> EpisodeRecord:
        return EpisodeRecord(
            self.episode_id,
            self.task_id,
            self.sample_index,
            self.status._value_,
            self.reward,
            self.n_steps,
            self.tool_errors,
            self.grader_failed is not None,
            self.error is not None and self.error.kind == "model",
        )

    @classmethod
    def from_json(cls, data: str | bytes) -> Trajectory:
        return _ADAPTER.validate_json(data)


_ADAPTER: TypeAdapter[Trajectory] = TypeAdapter(Trajectory)
_SERIALIZER = _ADAPTER.serializer
