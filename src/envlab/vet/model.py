"""The vet verdict format (``vet.json``): stable, versioned, with a JSON schema in ``docs/``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envlab.core import AgentSpec

SCHEMA_VERSION = "1"

CheckStatus = Literal["pass", "fail", "warn", "n/a"]
Verdict = Literal["ok", "quarantine", "broken", "trivial", "dead"]

# the order of severity: the first that applies is a task's verdict
SEVERITY: tuple[Verdict, ...] = ("quarantine", "broken", "trivial", "dead", "ok")

CHECKS: dict[str, Verdict] = {
    "noop": "trivial",
    "spam": "trivial",
    "oracle": "broken",
    "regrade": "broken",
    "tamper": "quarantine",
    "answer_leak": "quarantine",
    "network": "quarantine",
    "verifier_health": "broken",
    "trivial_strategies": "trivial",
    "trainability": "dead",
    "reset_hygiene": "broken",
    "paid_by_actions": "quarantine",
    "impossible_task": "broken",
}
"""Every per-task check, and the verdict its failure gives (``network`` gives ``broken`` when it
is the verifier that needs the network: see ``CheckResult.verdict``)."""


class CheckResult(BaseModel):
    """One check on one task. ``evidence`` holds what a reviewer needs to see why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: CheckStatus
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    verdict: Verdict | None = None
    """The verdict a failure gives (``None`` unless ``status`` is ``fail``)."""


class TaskVet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task_id: str
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list)
    """The failing checks behind the verdict, most severe first."""
    checks: list[CheckResult]


class EnvCheck(BaseModel):
    """A check on the environment as a whole (statistical adequacy, trainability roll-up)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: CheckStatus
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class EnvVet(BaseModel):
    """``vet.json``: the vetting of one environment."""

    model_config = ConfigDict(extra="forbid")

    schema_version: str = SCHEMA_VERSION
    env_id: str
    env_hash: str
    envlab_version: str
    created_at: float
    agent: AgentSpec | None
    """The agent of the trainability check (``None`` when it was skipped)."""
    settings: dict[str, Any]
    verdict_counts: dict[Verdict, int]
    quality_score: float
    """100 x the share of tasks whose verdict is ``ok``: what is left to train and measure on once
    quarantined, broken, trivial and dead tasks are dropped (they are dropped, not averaged)."""
    clean: bool
    """No task is quarantined: nothing in it lets an agent cheat."""
    env_checks: list[EnvCheck]
    tasks: list[TaskVet]
    elapsed_s: float
    episodes: int
    infra_errors: int
