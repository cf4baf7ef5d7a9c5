"""``tokens`` rows as the rollout structures of SkyRL and slime, field by field.

Read from their sources (not imported: neither is a dependency):

- SkyRL ``a9564572`` (2026-08-21), ``skyrl/train/generators/base.py``: ``GeneratorOutput``, a
  ``TypedDict`` of per-trajectory lists, and ``TrajectoryID(instance_id, repetition_id)``;
- slime ``624b824a`` (2026-08-21), ``slime/utils/types.py``: ``Sample``, a dataclass per
  trajectory, whose ``tokens`` are the prompt and the response together and whose
  ``loss_mask`` and ``rollout_log_probs`` cover the response (the last ``response_length``
  tokens).

Every field is one column of the row (``SKYRL_FIELDS``, ``SLIME_FIELDS``), except slime's
``tokens`` (``prompt_ids + completion_ids``) and ``status`` (envlab's status, named in slime's
words). ``skyrl_generator_output`` and ``slime_sample_fields`` build them from rows, as plain
Python values.
"""

from __future__ import annotations

from typing import Any

SKYRL_FIELDS: dict[str, str] = {
    "prompt_token_ids": "prompt_ids",
    "response_ids": "completion_ids",
    "rewards": "reward",
    "loss_masks": "loss_mask",
    "rollout_logprobs": "logprobs",
    "stop_reasons": "stop_reason",
    "trajectory_ids.instance_id": "group_id",
    "trajectory_ids.repetition_id": "sample_index",
}
"""SkyRL ``GeneratorOutput`` field (one list entry per row) -> the ``tokens`` column."""

SLIME_FIELDS: dict[str, str] = {
    "group_index": "group_index",
    "index": "index",
    "prompt": "prompt",
    "tokens": "prompt_ids + completion_ids",
    "response_length": "response_length",
    "reward": "reward",
    "loss_mask": "loss_mask",
    "rollout_log_probs": "logprobs",
    "weight_versions": "policy_version",
    "status": "status",
}
"""slime ``Sample`` field -> the ``tokens`` column it comes from (``index``: the row number)."""

SLIME_STATUS: dict[str, str] = {
    "ok": "completed",
    "truncated": "truncated",
    "timeout": "truncated",
    "agent_error": "failed",
}
"""envlab's status of a scored episode -> slime's ``Sample.Status`` value."""


def skyrl_generator_output(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``GeneratorOutput`` of ``rows``; ``trajectory_ids`` as ``(instance_id,
    repetition_id)`` pairs (``TrajectoryID(*pair)``); ``rollout_logprobs`` ``None`` unless
    every row has them, as SkyRL's generators return it."""
    logprobs = [r["logprobs"] for r in rows]
    return {
        "prompt_token_ids": [r["prompt_ids"] for r in rows],
        "response_ids": [r["completion_ids"] for r in rows],
        "rewards": [r["reward"] for r in rows],
        "loss_masks": [r["loss_mask"] for r in rows],
        "stop_reasons": [r["stop_reason"] for r in rows],
        "rollout_metrics": None,
        "rollout_logprobs": None if any(lp is None for lp in logprobs) else logprobs,
        "trajectory_ids": [(r["group_id"], r["sample_index"]) for r in rows],
    }


def slime_sample_fields(row: dict[str, Any], index: int) -> dict[str, Any]:
    """The keyword arguments of slime's ``Sample`` for ``row`` (``status`` as the value of
    ``Sample.Status``: ``Sample.Status(fields["status"])``)."""
    version = row["policy_version"]
    return {
        "group_index": row["group_index"],
        "index": index,
        "prompt": row["prompt"],
        "tokens": row["prompt_ids"] + row["completion_ids"],
        "response_length": row["response_length"],
        "reward": row["reward"],
        "loss_mask": row["loss_mask"],
        "rollout_log_probs": row["logprobs"],
        "weight_versions": [] if version is None else [version],
        "status": SLIME_STATUS[row["status"]],
    }
