"""A small decision model trained from scratch on CPU: hashed prompt features summed into a
hidden layer, ReLU, one logit per option (``envlab.train.features``).

- ``DecisionLearner`` (in ``envlab.train.decision_learner``): the ``Learner`` of ``envlab
  train``: a group-relative policy gradient from the reward alone, PPO-style clipped ratio
  against the behaviour logprob the agent recorded, optional entropy bonus, Adam.
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
)
from envlab.train.features import (
    FEATURES_VERSION,
    featurize,
    option_order,
    parse_options,
    read_decision,
)

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


__all__ = [
    "DecisionAgent",
    "DecisionPolicy",
    "PolicyWeights",
    "decision",
    "load_policy",
    "read_decision",
    "save_policy",
]
