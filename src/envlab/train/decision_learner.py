"""The learner of the decision model (``envlab.train.decision``): ``DecisionLearner``, an
``envlab.train.learner.Learner`` for ``envlab train``: a group-relative policy gradient from the
reward alone, PPO-style clipped ratio against the behaviour logprob the agent recorded, optional
entropy bonus, Adam. Deterministic given its seed and batches. torch is imported inside."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlab.core import ConfigError, Task
from envlab.train.decision import (
    LEARNER_FORMAT,
    DecisionPolicy,
    PolicyWeights,
)
from envlab.train.features import (
    FEATURES_VERSION,
    Samples,
    decision_samples,
    parse_options,
)
from envlab.train.learner import Group


# ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DecisionConfig:
    """The model's shape and the update's settings."""

    dim: int = 1 << 13
    """Hash buckets of the features (rows of the embedding)."""
    hidden: int = 32
    lr: float = 0.01
    clip: float = 0.2
    """PPO's clip of the ratio to the behaviour policy: ``[1 - clip, 1 + clip]``."""
    entropy_coef: float = 0.1
    """Weight of the mean entropy bonus; without it the policy collapses onto the options that
    are safe on average before it has tried the rarer ones where they are best."""
    scale_advantages: bool = False
    """Divide each group's centred rewards by their std (GRPO) or not (Dr. GRPO, the default:
    then ``entropy_coef`` is in reward units)."""
    max_grad_norm: float = 1.0
    init_std: float = 0.1
    seed: int = 0
    threads: int | None = 1
    """torch's intra-op threads during a step (restored after); ``None``: leave them. One is
    fastest for a model this small, several times faster than two on a busy 2-core machine."""

    def __post_init__(self) -> None:
        for name, f in self.__dataclass_fields__.items():
            value, kind = getattr(self, name), str(f.type)
            if not _type_ok(value, kind):
                raise ConfigError(f"decision learner setting {name} must be {kind}, got {value!r}")
        if self.dim < 2 or self.hidden < 1 or (self.threads is not None and self.threads < 1):
            raise ConfigError(
                f"decision learner: dim must be >= 2, hidden and threads >= 1 (got dim="
                f"{self.dim}, hidden={self.hidden}, threads={self.threads})"
            )
        if not (self.lr > 0 and self.clip > 0 and self.max_grad_norm > 0 and self.init_std > 0):
            raise ConfigError("decision learner: lr, clip, max_grad_norm and init_std must be > 0")
        if self.entropy_coef < 0:
            raise ConfigError(
                f"decision learner: entropy_coef must be >= 0, got {self.entropy_coef}"
            )


def _type_ok(value: Any, kind: str) -> bool:
    """``value`` fits the annotation ``kind`` (``int``, ``float``, ``bool``, ``int | None``)."""
    if value is None:
        return "None" in kind
    if isinstance(value, bool) or kind == "bool":
        return isinstance(value, bool) and kind == "bool"
    return isinstance(value, int) or (kind == "float" and isinstance(value, float))


class DecisionLearner:
    """The learner of the decision model (an ``envlab.train.learner.Learner``)."""

    def __init__(self, options: Sequence[str], config: DecisionConfig | None = None) -> None:
        import torch

        self.options = tuple(options)
        if len(self.options) < 2 or len(set(self.options)) != len(self.options):
            raise ConfigError(f"a decision model needs >= 2 distinct options, got {options!r}")
        self.config = cfg = config or DecisionConfig()
        g = torch.Generator().manual_seed(cfg.seed)
        k = len(self.options)
        self._params = {
            "embed": torch.randn(cfg.dim, cfg.hidden, generator=g) * cfg.init_std,
            "b1": torch.zeros(cfg.hidden),
            "w2": torch.randn(k, cfg.hidden, generator=g) * (0.1 / math.sqrt(cfg.hidden)),
            "b2": torch.zeros(k),
        }
        for p in self._params.values():
            p.requires_grad_(True)
        self._opt = torch.optim.Adam(list(self._params.values()), lr=cfg.lr)
        self._publish(0)

    @classmethod
    def for_tasks(
        cls, tasks: Sequence[Task], config: DecisionConfig | None = None
    ) -> DecisionLearner:
        """A learner for the options the tasks' prompts list (all must list the same ones)."""
        if not tasks:
            raise ConfigError("no tasks to read the decision options from")
        options = parse_options(tasks[0].prompt)
        for t in tasks:
            if set(parse_options(t.prompt)) != set(options):
                raise ConfigError(f"task {t.id!r} lists other options than {list(options)}")
        return cls(options, config)

    def _publish(self, version: int) -> None:
        weights = PolicyWeights.of(self.options, self._params, version, FEATURES_VERSION)
        self._published = (version, weights, DecisionPolicy(weights))  # one atomic reference

    @property
    def version(self) -> int:
        return self._published[0]

    @property
    def weights(self) -> PolicyWeights:
        """The frozen weights of the current version."""
        return self._published[1]

    def policy(self, *, greedy: bool = False) -> DecisionPolicy:
        """Agents over a frozen snapshot of the current weights (``factory.version`` says which)."""
        _, weights, sampling = self._published
        return sampling if not greedy else DecisionPolicy(weights, greedy=True)

    def save_policy(self, path: str | Path) -> None:
        """Write the current weights for the ``decision`` agent (``checkpoint=PATH``)."""
        self.weights.save(path)

    def step(self, batch: Sequence[Group]) -> dict[str, float]:
        """One Adam step on the batch's clipped group-relative policy-gradient loss.

        Samples without an action (``no_action``: the agent timed out or failed before acting)
        count in their group's rewards but add no term; a batch where no sample acted is still
        a step (the version advances) that leaves the weights and Adam's state as they were."""
        import torch

        cfg = self.config
        samples = decision_samples(batch, self.options, cfg.dim, scale=cfg.scale_advantages)
        if not samples.rewards:
            raise ConfigError("the batch given to DecisionLearner.step holds no samples")
        threads = torch.get_num_threads()
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        try:
            metrics = self._update(samples) if samples.advantages else _no_update()
        finally:
            torch.set_num_threads(threads)
        self._publish(self.version + 1)  # agents already made keep their own snapshot
        return {
            **metrics,
            "reward_mean": sum(samples.rewards) / len(samples.rewards),
            "samples": float(len(samples.rewards)),
            "no_action": float(samples.no_action),
            "dead_groups": float(samples.dead_groups),
        }

    def _update(self, samples: Samples) -> dict[str, float]:
        import torch

        cfg, p = self.config, self._params
        idx = torch.tensor(samples.indices, dtype=torch.long)
        offsets = torch.tensor(samples.offsets, dtype=torch.long)
        h = torch.relu(
            torch.nn.functional.embedding_bag(idx, p["embed"], offsets, mode="sum") + p["b1"]
        )
        logp_all = torch.log_softmax(h @ p["w2"].T + p["b2"], dim=1)
        choice = torch.tensor(samples.choices, dtype=torch.long)
        logp = logp_all.gather(1, choice[:, None])[:, 0]
        old = torch.tensor(samples.behaviour, dtype=logp.dtype)
        adv = torch.tensor(samples.advantages, dtype=logp.dtype)
        ratio = torch.exp(logp - old)
        clipped = torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip)
        pg_loss = -torch.minimum(ratio * adv, clipped * adv).mean()
        entropy = -(logp_all.exp() * logp_all).sum(1).mean()
        loss = pg_loss - cfg.entropy_coef * entropy
        self._opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(list(p.values()), cfg.max_grad_norm)
        self._opt.step()
        with torch.no_grad():
            return {
                "loss": float(loss),
                "pg_loss": float(pg_loss),
                "entropy": float(entropy),
                "clip_frac": float(((ratio - 1).abs() > cfg.clip).float().mean()),
                "approx_kl": float((old - logp).mean()),
                "grad_norm": float(grad_norm),
            }

    def state_dict(self) -> dict[str, Any]:
        """Weights, Adam's state, the version and the config: tensors, numbers, str, lists, dicts
        (``torch.load(weights_only=True)`` reads it). No random state: a step draws nothing."""
        cfg = self.config
        return {
            "format": LEARNER_FORMAT,
            "version": self.version,
            "options": list(self.options),
            "features": FEATURES_VERSION,
            "config": {f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
            "weights": {k: v.detach().clone() for k, v in self._params.items()},
            "optimizer": _plain(self._opt.state_dict()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state_dict()``'s output (a model of the same options and shape)."""
        import torch

        if state.get("format") != LEARNER_FORMAT:
            raise ConfigError(f"not a decision-learner state (format {state.get('format')!r})")
        saved = state["config"]
        mine = (list(self.options), FEATURES_VERSION, self.config.dim, self.config.hidden)
        theirs = (list(state["options"]), state["features"], saved["dim"], saved["hidden"])
        if mine != theirs:
            raise ConfigError(
                f"the checkpoint's model (options, features, dim, hidden) = {theirs} differs "
                f"from this learner's {mine}; resume with the same settings"
            )
        with torch.no_grad():
            for k, v in self._params.items():
                v.copy_(state["weights"][k])
        opt = state["optimizer"]
        for g in opt["param_groups"]:
            g["betas"] = tuple(g["betas"])
        self._opt.load_state_dict(opt)
        self._publish(int(state["version"]))


def _no_update() -> dict[str, float]:
    """The update's metrics when no sample of the batch acted: no loss, no gradient, no step."""
    names = ("loss", "pg_loss", "entropy", "clip_frac", "approx_kl", "grad_norm")
    return dict.fromkeys(names, 0.0)


def _plain(value: Any) -> Any:
    """Tuples as lists (Adam's ``betas``): what ``torch.load(weights_only=True)`` reads."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


__all__ = ["DecisionConfig", "DecisionLearner"]
