"""A small decision model trained from scratch on CPU: hashed prompt features summed into a
hidden layer, ReLU, one logit per option (``envlab.train.features``).

- ``DecisionLearner``: the ``envlab.train.learner.Learner`` of ``envlab train``: a group-relative
  policy gradient from the reward alone, PPO-style clipped ratio against the behaviour logprob
  the agent recorded, optional entropy bonus, Adam. Deterministic given its seed and batches.
- ``DecisionPolicy``: the ``AgentFactory`` over a frozen snapshot of the weights (or over none:
  the uniform random policy). Its agents sample with ``random.Random(ctx.seed)`` (or take the
  argmax when ``greedy``) and answer ``Action(text=option, info={"logprob", "choice"})``.
- ``decision(checkpoint=..., greedy=...)``: the agent entry point (``--agent decision``).

torch is imported inside the functions that need it; the uniform policy never imports it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from envlab.core import (
    Action,
    Agent,
    AgentFactory,
    AgentSpec,
    ConfigError,
    EpisodeContext,
    Observation,
    Task,
)
from envlab.train.features import (
    FEATURES_VERSION,
    Samples,
    decision_samples,
    featurize,
    option_order,
    parse_options,
    read_decision,
)
from envlab.train.learner import Group

POLICY_FORMAT = "envlab.decision.policy/1"
LEARNER_FORMAT = "envlab.decision.learner/1"
WEIGHT_NAMES = ("embed", "b1", "w2", "b2")


@dataclass(frozen=True, slots=True)
class PolicyWeights:
    """A frozen copy of the model: ``embed`` (dim x hidden), ``b1``, ``w2`` (K x hidden), ``b2``,
    as read-only float32 numpy arrays (the agents' forward pass needs no torch).

    Nothing changes these arrays after construction (the learner copies its parameters into a
    new one after each step), so every agent made over it acts the same for ever."""

    options: tuple[str, ...]
    dim: int
    arrays: dict[str, np.ndarray]
    version: int = 0
    features: str = FEATURES_VERSION
    digest: str = field(default="", compare=False)

    @staticmethod
    def of(
        options: Sequence[str], weights: dict[str, Any], version: int, features: str
    ) -> PolicyWeights:
        """A frozen copy of ``weights`` (torch tensors or arrays, by ``WEIGHT_NAMES``)."""
        frozen: dict[str, np.ndarray] = {}
        h = hashlib.blake2b(digest_size=16)
        h.update(("\0".join(options) + f"\0{features}").encode())
        for k in WEIGHT_NAMES:
            w = weights[k]
            w = w.detach().cpu().numpy() if hasattr(w, "detach") else w
            frozen[k] = a = np.array(w, dtype=np.float32, copy=True, order="C")
            a.setflags(write=False)
            h.update(a.tobytes())
        dim = int(frozen["embed"].shape[0])
        return PolicyWeights(tuple(options), dim, frozen, version, features, h.hexdigest())

    def logprobs(self, indices: Sequence[int]) -> list[float]:
        """Log-probabilities of ``self.options`` for one prompt's feature indices."""
        a = self.arrays
        h = np.maximum(a["embed"][np.asarray(indices, dtype=np.int64)].sum(0) + a["b1"], 0.0)
        z = (a["w2"] @ h + a["b2"]).astype(np.float64)
        z -= z.max()
        return (z - math.log(float(np.exp(z).sum()))).tolist()

    def save(self, path: str | Path) -> None:
        """Write the policy (for ``--agent decision --agent-arg checkpoint=PATH``)."""
        import torch

        state = {
            "format": POLICY_FORMAT,
            "options": list(self.options),
            "features": self.features,
            "version": self.version,
            "weights": {k: torch.from_numpy(a.copy()) for k, a in self.arrays.items()},
        }
        torch.save(state, str(path))


def load_policy(path: str | Path) -> PolicyWeights:
    """The policy in ``path``: a file of ``save_policy`` or a checkpoint of ``envlab train``
    (``{"learner": DecisionLearner.state_dict(), ...}``), read with ``weights_only=True``."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no decision-policy checkpoint at {str(p)!r}; pass checkpoint=PATH")
    try:
        state = torch.load(str(p), weights_only=True, map_location="cpu")
    except Exception as e:  # a corrupt or foreign file: the user's input
        raise ConfigError(f"cannot read decision-policy checkpoint {str(p)!r}: {e}") from e
    if isinstance(state, dict) and isinstance(state.get("learner"), dict):
        state = state["learner"]
    fmt = state.get("format") if isinstance(state, dict) else None
    if fmt not in (POLICY_FORMAT, LEARNER_FORMAT):
        raise ConfigError(
            f"{str(p)!r} is not a decision policy (format {fmt!r}); write one with "
            "DecisionLearner.save_policy or use a checkpoint of 'envlab train'"
        )
    if state.get("features") != FEATURES_VERSION:
        raise ConfigError(
            f"{str(p)!r} was trained on features {state.get('features')!r}; this envlab computes "
            f"{FEATURES_VERSION!r}: train it again"
        )
    return PolicyWeights.of(
        state["options"], state["weights"], int(state["version"]), str(state["features"])
    )


class DecisionAgent(Agent):
    """Plays one option of the prompt's ``Options:`` line, by the policy's distribution."""

    name = "decision"

    def __init__(self, factory: DecisionPolicy) -> None:
        self._factory = factory
        self._rng = random.Random(0)
        self._prompt = ""

    @property
    def spec(self) -> AgentSpec:
        return self._factory.spec

    async def start(self, ctx: EpisodeContext) -> None:
        self._rng = random.Random(ctx.seed)
        self._prompt = ctx.prompt

    async def act(self, observation: Observation) -> Action:
        prompt = observation.text or self._prompt
        options, logprobs = self._factory.distribution(prompt)
        if self._factory.greedy:
            choice = max(range(len(options)), key=lambda i: (logprobs[i], -i))
        else:
            u, acc, choice = self._rng.random(), 0.0, len(options) - 1
            for i, lp in enumerate(logprobs):
                acc += math.exp(lp)
                if u < acc:
                    choice = i
                    break
        return Action(text=options[choice], info={"logprob": logprobs[choice], "choice": choice})


class DecisionPolicy(AgentFactory):
    """The factory of ``DecisionAgent``s over one frozen ``PolicyWeights`` (``None``: uniform)."""

    def __init__(
        self, weights: PolicyWeights | None, *, greedy: bool = False, source: str | None = None
    ) -> None:
        self.weights, self.greedy = weights, greedy
        self.version = weights.version if weights is not None else 0
        if weights is None:
            model_id, digest = "uniform", None
        else:
            model_id, digest = f"decision-v{weights.version}-{weights.digest[:12]}", weights.digest
        self._spec = AgentSpec(
            name="decision",
            model_id=model_id,
            endpoint=source,
            weights_hash=digest,
            sampling={"greedy": greedy},
            harness="decision-policy",
            harness_version=FEATURES_VERSION,
        )

    @property
    def spec(self) -> AgentSpec:
        return self._spec

    def new_agent(self) -> Agent:
        return DecisionAgent(self)

    def distribution(self, prompt: str) -> tuple[tuple[str, ...], list[float]]:
        """The prompt's options (its order) and their log-probabilities under this policy."""
        w = self.weights
        if w is None:
            options = parse_options(prompt)
            return options, [-math.log(len(options))] * len(options)
        feats = featurize(prompt, w.dim)
        order = option_order(feats.options, w.options)
        lps = w.logprobs(feats.indices)
        return feats.options, [lps[j] for j in order]


def decision(*, checkpoint: str | None = None, greedy: bool = True, **unknown: Any) -> AgentFactory:
    """The ``decision`` agent: the policy in ``checkpoint`` (``save_policy`` or an
    ``envlab train`` checkpoint), greedy by default (``greedy=false``: sample); without a
    checkpoint, the uniform random policy over the prompt's options (the ``random`` baseline)."""
    if unknown:
        raise ConfigError(
            f"unknown argument(s) of the decision agent: {sorted(unknown)}; it takes "
            "checkpoint=PATH and greedy=true|false"
        )
    if not isinstance(greedy, bool):
        raise ConfigError(f"greedy must be true or false, got {greedy!r}")
    if checkpoint is None:
        return DecisionPolicy(None, greedy=False, source=None)
    return DecisionPolicy(load_policy(checkpoint), greedy=greedy, source=str(checkpoint))


def save_policy(weights: PolicyWeights, path: str | Path) -> None:
    """Write ``weights`` where ``load_policy`` and ``decision(checkpoint=...)`` read them."""
    weights.save(path)


# --- the learner ------------------------------------------------------------------------------
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


__all__ = [
    "DecisionAgent",
    "DecisionConfig",
    "DecisionLearner",
    "DecisionPolicy",
    "PolicyWeights",
    "decision",
    "load_policy",
    "read_decision",
    "save_policy",
]
