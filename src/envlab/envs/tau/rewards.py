"""τ-bench's own reward for a τ episode (``reward=tau``), and what the graders read.

``tau`` is what τ-bench's ``Env.calculate_reward`` gives (``tau_bench/envs/base.py``): 1 when the
final database hashes as the one the gold actions produce and every required output string is in
the agent's messages to the user (lower case, commas removed, as τ-bench compares). The hash tells
types apart (``1490.0`` is not ``1490``, ``True`` is not ``1``: ``envs/tau/identity.py``); here
the records that changed (``changes``, changed as the hash tells) must be the task's ``gold_diff``
for that hash, record by record, which is the same test without hashing the untouched records.
envlab's ``reward=strict`` puts gates in front of it: ``envs/tau/strict.py``.

The graders read ``state()``: ``changes`` and ``events``, the conversation in order (``by``:
``user``, ``agent`` or ``tool``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from envlab.core import Component, GradingContext, Rubric
from envlab.envs.tau.identity import same_data

IDENTITY_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")
TRANSFER = "transfer_to_human_agents"


def events(ctx: GradingContext, by: str) -> Iterator[dict[str, Any]]:
    return (e for e in ctx.state["events"] if e["by"] == by)


def db_match(ctx: GradingContext) -> float:
    return float(same_data(ctx.state["changes"], ctx.task.answer["gold_diff"]))


def outputs(ctx: GradingContext) -> float:
    said = [e["text"].lower().replace(",", "") for e in events(ctx, "agent")]
    return float(all(any(o.lower() in s for s in said) for o in ctx.task.answer["outputs"]))


def tau(ctx: GradingContext) -> float:
    return min(db_match(ctx), outputs(ctx))


TAU_COMPONENTS = [
    Component("tau", tau, weight=1.0, description="database equals the gold one and outputs said"),
    Component("db_match", db_match, weight=0.0, description="final database equals the gold one"),
    Component("outputs", outputs, weight=0.0, description="every required output told the user"),
]
TAU_RUBRIC = Rubric(list(TAU_COMPONENTS))
