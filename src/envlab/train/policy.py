"""The trainer's own model as an envlab agent: ``TransformersPolicy`` generates with a
``transformers`` causal LM in this process, token-exact, so that the rollout engine can run
episodes with the very policy a trainer is updating.

It stands where ``OpenAICompatModel`` stands under ``ToolCallingHarness`` (text mode: the tools
block in the system prompt, ``<tool_call>`` in the reply, ``<tool_response>`` turns back), and
returns each turn's prompt ids, completion ids and logprobs:

- the first turn's prompt is the chat template's rendering of the messages;
- a later turn's prompt is the previous turn's prompt and completion *as generated*, then the
  tokens the template adds for the new messages (the end of the assistant turn, the tool
  responses, the next assistant header), tokenized on their own, as TRL's tool loop does
  (``GRPOTrainer._get_tool_suffix_ids``): the model's own tokens are never re-tokenized, so the
  ids are what the policy saw and sampled, not a re-rendering of decoded text;
- logprobs are those of the sampling distribution (``logits / temperature``; no top-k, no
  top-p), one per completion token;
- sampling draws from torch's global generator (which the trainer seeds); the episode seed the
  harness sends is not applied, so as not to reseed the trainer's generator every turn.

torch is imported lazily, inside the calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from envlab.agents.harness import HarnessLimits, HarnessSettings, ToolCallingHarness
from envlab.core import AgentFactory, AgentSpec, ConfigError, not_agent_time
from envlab.models.client import ModelReply, RetryPolicy, Sampling
from envlab.train.batching import BatchedSampler


class TransformersPolicy:
    """One episode's model client over a shared ``transformers`` model (duck-typed as the
    harness's ``OpenAICompatModel``: ``chat``, ``sampling``, ``logprobs``, ``timeout_s``,
    ``retry``, ``aclose``). Generation runs in a worker thread, one at a time (``lock``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        temperature: float = 1.0,
        max_tokens: int = 128,
        lock: threading.Lock | None = None,
        timeout_s: float = 600.0,
        sampler: BatchedSampler | None = None,
    ) -> None:
        """``sampler``: generate through a ``BatchedSampler`` shared by the episodes (a group's
        samples in one batch; see its module for what that costs in reproducibility)."""
        if temperature <= 0:
            raise ConfigError(f"temperature must be > 0 for sampling, got {temperature}")
        if tokenizer.eos_token_id is None:
            raise ConfigError("the tokenizer has no eos_token: set tokenizer.eos_token")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.sampling = Sampling(temperature=temperature, top_p=1.0, max_tokens=max_tokens)
        self.logprobs = True
        self.timeout_s = timeout_s
        self.retry = RetryPolicy(max_retries=0)
        self._lock = lock or threading.Lock()
        self._sampler = sampler
        self._full: list[int] | None = None  # the last turn's prompt + completion ids
        self._seen: list[dict[str, Any]] = []  # the messages of the last turn, and its reply

    def _render(self, messages: list[dict[str, Any]], generation: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation
        )
        return str(text)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids of this turn's prompt: the earlier turns' ids as they were, then the new
        messages' tokens; a conversation that does not extend the last turn is rendered whole."""
        n = len(self._seen)
        if self._full is None or n == 0 or messages[:n] != self._seen:
            return self._encode(self._render(messages, True))
        before = self._render(messages[:n], False)
        after = self._render(messages, True)
        eos = self.tokenizer.eos_token
        cut = before.rfind(eos)
        if not after.startswith(before) or cut < 0:
            return self._encode(after)  # the template re-renders the past: the view breaks
        ids = list(self._full)
        if ids[-1] != self.tokenizer.eos_token_id:  # a reply cut at max_tokens: end its turn
            ids.append(self.tokenizer.eos_token_id)
        return ids + self._encode(before[cut + len(eos) :] + after[len(before) :])

    def _generate(self, prompt: list[int], max_new: int) -> tuple[list[int], list[float]]:
        import torch
        from transformers import GenerationConfig

        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        config = GenerationConfig(
            do_sample=True,
            temperature=self.sampling.temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max(1, max_new),
            eos_token_id=eos,
            pad_token_id=pad,
            output_scores=True,
            return_dict_in_generate=True,
        )
        was_training = self.model.training
        self.model.eval()
        try:
            device = next(self.model.parameters()).device
            ids = torch.tensor([prompt], device=device)
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    generation_config=config,
                )
        finally:
            self.model.train(was_training)
            self._lock.release()  # taken by chat(); released here, even if chat was cancelled
        completion = out.sequences[0, len(prompt) :].tolist()
        logps = [
            float(torch.log_softmax(score[0].float(), dim=-1)[tok])
            for score, tok in zip(out.scores, completion, strict=False)
        ]
        if eos in completion:  # nothing after the end of the turn
            end = completion.index(eos) + 1
            completion, logps = completion[:end], logps[:end]
        return completion, logps

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        **_: Any,
    ) -> ModelReply:
        """One completion of ``messages`` (text mode: ``tools`` must be None)."""
        if tools:
            raise ConfigError("TransformersPolicy runs the harness in text mode (tool_mode='text')")
        prompt = self.prompt_ids(messages)
        max_new = min(self.sampling.max_tokens or 128, max_tokens or 1 << 30)
        t = time.perf_counter()
        if self._sampler is not None:
            request = self._sampler.submit(prompt, max_new, self._sample_seed(seed))
            try:
                async with not_agent_time("policy queue"):  # other episodes' batches, not its own
                    await request.started
                completion, logps = await request.future
            except asyncio.CancelledError:
                request.future.cancel()  # a batch not yet run leaves it out
                raise
        else:
            async with not_agent_time("policy queue"):  # other episodes' turns are not this one's
                while not self._lock.acquire(blocking=False):
                    await asyncio.sleep(0.002)
            completion, logps = await self._generate_holding_lock(prompt, max_new)
        eos = self.tokenizer.eos_token_id
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        self._full = prompt + completion
        self._seen = [dict(m) for m in messages] + [{"role": "assistant", "content": text}]
        return ModelReply(
            text=text,
            finish_reason="stop" if completion and completion[-1] == eos else "length",
            usage={"prompt_tokens": len(prompt), "completion_tokens": len(completion)},
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=logps,
            model=self.name,
            latency_s=time.perf_counter() - t,
        )

    async def _generate_holding_lock(
        self, prompt: list[int], max_new: int
    ) -> tuple[list[int], list[float]]:
        """``_generate`` in a worker thread, which releases the lock this call holds. Shielded:
        an episode cancelled here (its step's time limit) must not cancel the thread's work
        before it starts, or the lock would never be released and every other episode would
        wait for it forever (found by tests/train/test_lm_episodes.py's cut episodes)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, self._generate, prompt, max_new)
        work = loop.run_in_executor(None, call)
        work.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved if orphaned
        return await asyncio.shield(work)

    def _sample_seed(self, seed: int | None) -> int:
        """The seed of a batched sample: drawn from torch's global generator (which the trainer
        seeds), as ``_generate`` samples from it."""
        import torch

        return int(torch.randint(0, 2**62, (1,)))

    async def aclose(self) -> None:
        return None


class PolicyAgents(AgentFactory):
    """Agents made of ``ToolCallingHarness`` (text mode) over one in-process model: one per
    episode, all sharing the model and taking turns at it."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "trl-policy",
        model_id: str = "policy",
        temperature: float = 1.0,
        max_tokens: int = 128,
        max_turns: int = 8,
        max_episode_tokens: int = 1024,
        instructions: str | None = None,
        client: Callable[..., TransformersPolicy] | None = None,
        seed_from_episode: bool = False,
        batch: bool = False,
    ) -> None:
        """``client`` makes each episode's model client (default ``TransformersPolicy``; e.g.
        a subclass that samples from the turn's seed); ``seed_from_episode`` sends it the
        harness's ``episode seed + turn``; ``batch`` samples the episodes that wait with the same
        prompt in one batch (``envlab.train.batching``: several times faster for groups, not
        bit-for-bit reproducible)."""
        self._lock = threading.Lock()
        make = client or TransformersPolicy
        sampler = None
        if batch:
            eos = tokenizer.eos_token_id
            sampler = BatchedSampler(model, eos_id=eos, temperature=temperature, lock=self._lock)
        self.sampler = sampler
        self._make = lambda: make(
            model,
            tokenizer,
            name=name,
            temperature=temperature,
            max_tokens=max_tokens,
            lock=self._lock,
            sampler=sampler,
        )
        settings = HarnessSettings(tool_mode="text", seed_from_episode=seed_from_episode)
        if instructions is not None:
            settings = HarnessSettings(
                instructions=instructions, tool_mode="text", seed_from_episode=seed_from_episode
            )
        self._harness: dict[str, Any] = dict(
            agent_name=name,
            model_id=model_id,
            endpoint="in-process: the trainer's transformers model",
            limits=HarnessLimits(max_turns=max_turns, max_tokens=max_episode_tokens),
            settings=settings,
        )
        self._spec = ToolCallingHarness(self._make(), **self._harness).spec  # type: ignore[arg-type]

    @property
    def spec(self) -> AgentSpec:
        return self._spec

    def new_agent(self) -> ToolCallingHarness:
        return ToolCallingHarness(self._make(), **self._harness)  # type: ignore[arg-type]
