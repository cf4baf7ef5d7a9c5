"""One exported row per episode (or per pair, for ``dpo``), in the shape trainers read.

- ``sft``: TRL's conversational language-modeling rows, ``messages`` and ``tools``;
- ``dpo``: TRL's conversational preference rows, ``prompt``, ``chosen``, ``rejected``, ``tools``;
- ``grpo``: TRL's conversational prompt-completion rows with ``reward`` and the group's
  ``advantage``;
- ``tokens``: the token view (``prompt_ids``, ``completion_ids``, ``loss_mask``, ``logprobs``)
  with ``reward``, ``advantage``, ``group_id`` and ``policy_version``.

``messages`` are the on-policy transcript exactly as recorded. ``tools`` is what the model's
request carried, as a JSON string (a column of nested JSON schemas that differ from tool to
tool would be widened by Arrow into one struct whose missing keys read back as nulls, which
changes the schemas a chat template renders; TRL ``json.loads`` a string ``tools``). In the
harness's text mode the tools were written into the system prompt and the request had none:
then ``tools`` is null, so a trainer does not render them twice.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from envlab.core import Trajectory
from envlab.export.groups import DEFAULT_EPS, Group

Format = Literal["sft", "dpo", "grpo", "tokens"]
FORMATS: tuple[Format, ...] = ("sft", "dpo", "grpo", "tokens")


def request_tools(traj: Trajectory) -> str | None:
    """The tools the model's requests carried, as JSON text; ``None`` when they carried none."""
    if traj.agent.harness.startswith("tool-calling/text") or not traj.tools:
        return None
    return json.dumps(traj.tools, ensure_ascii=False)


def policy_version(traj: Trajectory) -> str | None:
    """The policy (weights) version that produced the episode, when the engine recorded one
    (``trajectory.info["policy_version"]``; not recorded yet, so usually ``None``)."""
    v = traj.info.get("policy_version")
    return None if v is None else str(v)


def split_prompt(
    messages: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(prompt, completion)``: the messages before the first model reply, and the rest."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return [dict(m) for m in messages[:first]], [dict(m) for m in messages[first:]]


def _ids(traj: Trajectory) -> dict[str, Any]:
    return {
        "episode_id": traj.episode_id,
        "group_id": traj.group_id,
        "task_id": traj.task_id,
        "sample_index": traj.sample_index,
    }


def sft_row(traj: Trajectory) -> dict[str, Any]:
    return {
        "messages": [dict(m) for m in traj.messages],
        "tools": request_tools(traj),
        **_ids(traj),
        "reward": traj.reward,
    }


def dpo_row(chosen: Trajectory, rejected: Trajectory) -> dict[str, Any] | None:
    """The pair, or ``None`` when the two episodes did not start from the same prompt."""
    prompt, good = split_prompt(chosen.messages)
    other, bad = split_prompt(rejected.messages)
    if prompt != other or not good or not bad:
        return None
    return {
        "prompt": prompt,
        "chosen": good,
        "rejected": bad,
        "tools": request_tools(chosen),
        "group_id": chosen.group_id,
        "task_id": chosen.task_id,
        "chosen_episode_id": chosen.episode_id,
        "rejected_episode_id": rejected.episode_id,
        "chosen_reward": chosen.reward,
        "rejected_reward": rejected.reward,
    }


def _group_fields(traj: Trajectory, group: Group, eps: float) -> dict[str, Any]:
    assert traj.reward is not None
    return {
        "reward": traj.reward,
        "advantage": group.advantage(traj.reward, eps),
        "group_mean": group.mean,
        "group_std": group.std,
        "group_size": len(group.members),
        "dead_group": group.dead,
    }


def grpo_row(traj: Trajectory, group: Group, eps: float = DEFAULT_EPS) -> dict[str, Any]:
    prompt, completion = split_prompt(traj.messages)
    return {
        "prompt": prompt,
        "completion": completion,
        "tools": request_tools(traj),
        **_ids(traj),
        **_group_fields(traj, group, eps),
        "policy_version": policy_version(traj),
    }


def tokens_row(
    traj: Trajectory, group: Group, eps: float = DEFAULT_EPS, drift: str | None = None
) -> dict[str, Any]:
    """The token view as recorded. ``logprobs`` is ``None`` when the server returned none;
    else one per completion token (0.0 where ``loss_mask`` is 0: tokens the model did not
    sample). ``token_drift`` says where the view differs from the re-rendered messages, when
    the export was asked to mark such episodes rather than refuse them."""
    tv = traj.tokens
    assert tv is not None
    return {
        "prompt_ids": list(tv.prompt_ids),
        "completion_ids": list(tv.completion_ids),
        "loss_mask": list(tv.loss_mask),
        "logprobs": list(tv.logprobs) if tv.logprobs else None,
        **_ids(traj),
        **_group_fields(traj, group, eps),
        "policy_version": policy_version(traj),
        "turn_starts": list(tv.turn_starts),
        "token_drift": drift,
    }
