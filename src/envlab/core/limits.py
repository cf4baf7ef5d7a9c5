"""``Limits``: what one episode may spend. One typed policy, declared per task by the spec."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """The limits of one episode of one task.

    ``EnvSpec.limits(task)`` declares them (a task folder reads its ``task.toml``); the user's
    overrides (``envlab eval --step-timeout ...``) go on top with ``over``. ``None`` means no
    limit. The step and episode limits are on the agent's clock (waiting for shared resources
    is not counted, ``core.clock``) and running past them is the agent's ``timeout``; reset and
    grade limits are the machinery's and the grader's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int | None = Field(50, ge=1)
    step_timeout_s: float | None = Field(60.0, gt=0)
    episode_timeout_s: float | None = Field(600.0, gt=0)
    reset_timeout_s: float | None = Field(900.0, gt=0)
    """Building a workspace, starting a sandbox: never the agent's time; past it ``infra_error``."""
    grade_timeout_s: float | None = Field(600.0, gt=0)
    tool_call_s: float | None = Field(60.0, gt=0)
    """One sync tool call's time (``ToolEnv``: tools run off the event loop); past it, or past
    ``tool_cpu_s`` of CPU, the call is the agent's tool error and ends the episode, scored 0."""
    tool_cpu_s: float | None = Field(10.0, gt=0)

    def over(self, base: Limits) -> Limits:
        """``base`` with the fields set explicitly on ``self`` replacing its own."""
        if not self.model_fields_set:
            return base
        return base.model_copy(update={k: getattr(self, k) for k in self.model_fields_set})

    @classmethod
    def overrides(cls, **values: Any) -> Limits:
        """Limits with only the given, non-``None`` fields set (for ``over``)."""
        return cls(**{k: v for k, v in values.items() if v is not None})
