"""The LM learner's batch: trajectories' token views checked, turned into samples with their
group-relative advantages, and packed into tensors in TRL's layout (``envlab.train.lm_learner``
computes the loss on them)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envlab.core import ConfigError, Trajectory
from envlab.train.learner import Group, group_advantages


@dataclass(frozen=True, slots=True)
class Sample:
    episode_id: str
    prompt: list[int]
    completion: list[int]
    mask: list[int]
    behaviour: list[float]
    advantage: float


def checked(t: Trajectory, advantage: float, vocab: int | None = None) -> Sample:
    """The trajectory's token view, or a ConfigError naming the episode."""
    tv = t.tokens
    where = f"episode {t.episode_id!r} (task {t.task_id!r})"
    if tv is None or not tv.completion_ids:
        raise ConfigError(
            f"{where} has no token view to train on: the LM learner needs the agent's token "
            "ids and logprobs (act with LMLearner.policy(), or an agent that records them)"
        )
    n = len(tv.completion_ids)
    if len(tv.loss_mask) != n or len(tv.logprobs) != n or not tv.prompt_ids:
        raise ConfigError(
            f"{where}: its token view's lengths disagree (prompt {len(tv.prompt_ids)}, "
            f"completion {n}, loss_mask {len(tv.loss_mask)}, logprobs {len(tv.logprobs)}): "
            "each completion token needs one mask bit and one behaviour logprob"
        )
    if not all(math.isfinite(x) for x in tv.logprobs):
        raise ConfigError(f"{where}: its behaviour logprobs are not all finite")
    ids = [*tv.prompt_ids, *tv.completion_ids]
    if vocab is not None and (min(ids) < 0 or max(ids) >= vocab):
        raise ConfigError(
            f"{where}: token ids outside the model's vocabulary of {vocab} (ids "
            f"{min(ids)}..{max(ids)}): was it played by another model's tokenizer?"
        )
    mask, logprobs = [int(bool(m)) for m in tv.loss_mask], [float(x) for x in tv.logprobs]
    return Sample(
        t.episode_id, list(tv.prompt_ids), list(tv.completion_ids), mask, logprobs, advantage
    )


def untrainable(t: Trajectory) -> bool:
    """No token view to learn from: the episode ended before the model's first reply came
    back (a harness stop, a timeout mid-generation), or its view broke."""
    return t.tokens is None or not t.tokens.completion_ids


def batch_samples(
    batch: Sequence[Group], scale: bool, vocab: int | None
) -> tuple[list[Sample], int]:
    """The batch's samples and how many trajectories had no token view: those count in their
    group's advantages (their reward is the agent's, a 0 for a timeout) but add no loss."""
    out: list[Sample] = []
    skipped = 0
    for g in batch:
        for t in g.trajectories:
            if t.reward is None or not math.isfinite(float(t.reward)):
                raise ConfigError(
                    f"episode {t.episode_id!r} of group {g.group_id!r} has no valid reward: "
                    "only scored trajectories belong in a Group"
                )
        advantages = group_advantages([float(t.reward or 0.0) for t in g.trajectories], scale=scale)
        for t, a in zip(g.trajectories, advantages, strict=True):
            if untrainable(t):
                skipped += 1
            else:
                out.append(checked(t, a, vocab))
    return out, skipped


def pack(samples: Sequence[Sample], device: Any, pad: int = 0) -> dict[str, Any]:
    """TRL's layout: prompts padded on the left, completions on the right, so that every
    completion starts at column ``P``; explicit position ids, so the padding moves nothing.
    The padding is masked out of attention and loss: its id is 0, in every vocabulary (a
    tokenizer's pad id may lie past the embeddings)."""
    import torch

    p = max(len(s.prompt) for s in samples)
    c = max(len(s.completion) for s in samples)
    ids, attn, mask, behaviour = [], [], [], []
    for s in samples:
        left, right = p - len(s.prompt), c - len(s.completion)
        ids.append([pad] * left + s.prompt + s.completion + [pad] * right)
        attn.append([0] * left + [1] * (len(s.prompt) + len(s.completion)) + [0] * right)
        mask.append(s.mask + [0] * right)
        behaviour.append(s.behaviour + [0.0] * right)
    attention = torch.tensor(attn, device=device)
    return {
        "input_ids": torch.tensor(ids, device=device),
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "mask": torch.tensor(mask, device=device, dtype=torch.float32),
        "behaviour": torch.tensor(behaviour, device=device, dtype=torch.float32),
        "advantages": torch.tensor([s.advantage for s in samples], device=device).unsqueeze(1),
        "completion_len": c,
    }
