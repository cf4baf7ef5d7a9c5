"""One exported row per episode (or per pair, for ``dpo``; per task, for ``verl``), in the shape
trainers read.

- ``sft``: TRL's conversational language-modeling rows, ``messages`` and ``tools``;
- ``dpo``: TRL's conversational preference rows, ``prompt``, ``chosen``, ``rejected``, ``tools``;
- ``grpo``: TRL's conversational prompt-completion rows with ``reward``, the group's
  ``advantage`` and the first prompt's rendered text;
- ``tokens``: the token view (``prompt_ids``, ``completion_ids``, ``loss_mask``, ``logprobs``)
  with the messages it renders from, ``reward``, ``advantage``, ``group_id``; one column per
  field of SkyRL's ``GeneratorOutput`` and slime's ``Sample`` (docs/export.md);
- ``verl``: verl's RL prompt dataset (``verl_rows``).

Every message column is the model's view (``views``): what the chat template was given, so that
``apply_chat_template(prompt, tools=tools, add_generation_prompt=True)`` with the model's stock
template re-renders the ids the model got. ``tools`` is what the template received, as a JSON
string (a column of nested JSON schemas that differ from tool to tool would be widened by Arrow
into one struct whose missing keys read back as nulls, which changes the schemas a chat template
renders; TRL ``json.loads`` a string ``tools``); null when the template received none (text
mode, the embedded engine: the tools are in the system prompt), so a trainer does not render
them twice.
"""

from __future__ import annotations

from typing import Any, Literal

from envlab.core import Trajectory
from envlab.export.groups import DEFAULT_EPS, Group
from envlab.export.views import ModelView

Format = Literal["sft", "dpo", "grpo", "tokens", "verl"]
FORMATS: tuple[Format, ...] = ("sft", "dpo", "grpo", "tokens", "verl")


def policy_version(traj: Trajectory) -> str | None:
    """The policy (weights) version that produced the episode, when the engine recorded one
    (``trajectory.info["policy_version"]``; not recorded yet, so usually ``None``)."""
    v = traj.info.get("policy_version")
    return None if v is None else str(v)


def stop_reason(traj: Trajectory) -> str | None:
    """The finish reason of the episode's last model turn (``stop``, ``length``, ...)."""
    for step in reversed(traj.steps):
        if step.message_index is not None:
            reason = step.action.info.get("finish_reason")
            return None if reason is None else str(reason)
    return None


def _ids(traj: Trajectory) -> dict[str, Any]:
    return {
        "episode_id": traj.episode_id,
        "group_id": traj.group_id,
        "task_id": traj.task_id,
        "sample_index": traj.sample_index,
    }


def sft_row(traj: Trajectory, view: ModelView) -> dict[str, Any]:
    return {
        "messages": [dict(m) for m in view.messages],
        "tools": view.tools_json(),
        **_ids(traj),
        "reward": traj.reward,
    }


def dpo_row(
    chosen: Trajectory, rejected: Trajectory, views: tuple[ModelView, ModelView]
) -> dict[str, Any] | None:
    """The pair, or ``None`` when the two episodes did not start from the same prompt."""
    good_view, bad_view = views
    prompt, good = good_view.prompt(), good_view.completion()
    if prompt != bad_view.prompt() or good_view.tools != bad_view.tools:
        return None
    bad = bad_view.completion()
    if not good or not bad:
        return None
    return {
        "prompt": prompt,
        "chosen": good,
        "rejected": bad,
        "tools": good_view.tools_json(),
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


def grpo_row(
    traj: Trajectory,
    view: ModelView,
    group: Group,
    eps: float = DEFAULT_EPS,
    prompt_text: str | None = None,
) -> dict[str, Any]:
    """``prompt_text``: the first prompt as the template rendered it (when a renderer ran)."""
    return {
        "prompt": view.prompt(),
        "completion": view.completion(),
        "tools": view.tools_json(),
        "prompt_text": prompt_text,
        **_ids(traj),
        **_group_fields(traj, group, eps),
        "policy_version": policy_version(traj),
    }


def tokens_row(
    traj: Trajectory,
    view: ModelView,
    group: Group,
    *,
    group_index: int,
    prompt_len: int,
    prompt_text: str | None,
    eps: float = DEFAULT_EPS,
    drift: str | None = None,
) -> dict[str, Any]:
    """The token view, split after ``prompt_len`` ids: the first turn's prompt up to its
    generation prompt; a prefill the engine added there (a forced tool call) starts
    ``completion_ids``, mask 0, as every token the model did not sample. ``logprobs`` is
    ``None`` when the server returned none; else one per completion token (0.0 where
    ``loss_mask`` is 0). ``token_drift`` says where the view differs from the re-rendered
    messages, when the export was asked to mark such episodes rather than refuse them."""
    tv = traj.tokens
    assert tv is not None
    moved = tv.prompt_ids[prompt_len:]
    completion = moved + tv.completion_ids
    logprobs = [0.0] * len(moved) + tv.logprobs if tv.logprobs else None
    return {
        "prompt_ids": tv.prompt_ids[:prompt_len],
        "completion_ids": completion,
        "loss_mask": [0] * len(moved) + tv.loss_mask,
        "logprobs": logprobs,
        "response_length": len(completion),
        "prompt": view.prompt(),
        "completion": view.completion(),
        "tools": view.tools_json(),
        "prompt_text": prompt_text,
        **_ids(traj),
        "group_index": group_index,
        **_group_fields(traj, group, eps),
        "status": traj.status.value,
        "stop_reason": stop_reason(traj),
        "policy_version": policy_version(traj),
        "turn_starts": list(tv.turn_starts),
        "token_drift": drift,
    }
