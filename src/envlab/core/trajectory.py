"""The record of one episode, and the spec of the agent that produced it."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
        return self not in (Status.ENV_ERROR, Status.INFRA_ERROR)


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


class TokenView(BaseModel):
    """Token-level view of an episode for trainers, when the model server returns it."""

    prompt_ids: list[int] = Field(default_factory=list)
    completion_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)


class StepRecord(BaseModel):
    """One step: what the agent did, what it saw, how long it took."""

    index: int
    action: dict[str, Any]
    observation: dict[str, Any]
    reward: float = 0.0
    tool_errors: int = 0
    info: dict[str, Any] = Field(default_factory=dict)
    agent_s: float = 0.0
    env_s: float = 0.0


class Timings(BaseModel):
    started_at: float = 0.0
    ended_at: float = 0.0
    duration_s: float = 0.0
    agent_s: float = 0.0
    env_s: float = 0.0
    grade_s: float = 0.0


class Trajectory(BaseModel):
    """One episode, as written to ``trajectories.jsonl`` (one JSON object per line)."""

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
    components: dict[str, float] = Field(default_factory=dict)
    gated_by: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[StepRecord] = Field(default_factory=list)
    tokens: TokenView | None = None
    n_steps: int = 0
    tool_errors: int = 0
    attempts: int = 1
    error: str | None = None
    timings: Timings = Field(default_factory=Timings)
    info: dict[str, Any] = Field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.status.scored and self.reward is not None
