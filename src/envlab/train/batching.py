"""``BatchedSampler``: the episodes of a GRPO group sampled in one batch over one model.

A group's episodes start together and, on their first turn, send the same prompt. One at a time
(``TransformersPolicy``'s default) each pays the prompt's forward pass and its own decoding
loop; here every request with the same prompt ids that is waiting when the model is free
shares one prefill (its KV cache repeated per row) and one decoding loop of batched forward
passes. Measured on 2 CPU cores with SmolLM2-135M (a 300-token prompt, 8 samples of 8 tokens):
prefill 0.3-0.6 s, then 8 rows decoded in 0.58 s against 0.31 s for one row, so a group of 8
costs about 1.1 s instead of about 6 s (``bench/lm_learns.py`` uses it).

Each row samples from its own ``torch.Generator`` seeded from the request's seed, at
``temperature`` over the whole vocabulary (no top-k, no top-p), and records the logprob of each
token it drew under ``logits / temperature``: the behaviour logprobs the learner's ratio needs.

The price, said plainly: a row's logits computed in a batch differ from the same row's alone
in the last float bits (measured: up to 6e-5 on this CPU, depending on the batch's size and the
row's place in it), so which requests share a batch can, rarely, change a sample. Batches form
from what is waiting when the model becomes free, which depends on timing: two runs with the
same seeds are the same up to those rare flips, not bit for bit. ``TransformersPolicy`` without
a sampler stays reproducible per episode.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class _Request:
    prompt: list[int]
    max_new: int
    seed: int
    future: asyncio.Future[tuple[list[int], list[float]]]
    started: asyncio.Future[None]
    """Set when its batch starts: the wait before it is the machine's queue, not the agent's."""
    result: tuple[list[int], list[float]] | None = None
    error: BaseException | None = None


class BatchedSampler:
    """Completions of many episodes over one ``transformers`` causal LM, batched by prompt.

    ``lock`` is held while the model runs (the learner's step may hold it to change the
    weights: share the policy's)."""

    def __init__(
        self,
        model: Any,
        *,
        eos_id: int,
        temperature: float,
        max_batch: int = 64,
        lock: threading.Lock | None = None,
    ) -> None:
        self.model, self.eos_id, self.temperature = model, eos_id, temperature
        self.max_batch = max_batch
        self._lock = lock or threading.Lock()
        self._pending: list[_Request] = []
        self._drainer: asyncio.Task[None] | None = None
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.batches: list[int] = []
        """The number of rows of each batch run (for benchmarks and tests)."""

    def submit(self, prompt: list[int], max_new: int, seed: int) -> _Request:
        """Queue ``prompt``: ``request.started`` is set when its batch starts and
        ``request.future`` holds its completion (up to ``max_new`` tokens, ending at the
        end-of-turn id) and the logprob of each of its tokens."""
        loop = asyncio.get_running_loop()
        request = _Request(
            list(prompt), max(1, max_new), seed, loop.create_future(), loop.create_future()
        )
        self._pending.append(request)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        return request

    async def _drain(self) -> None:
        for _ in range(4):  # the other episodes of the group reach their first turn
            await asyncio.sleep(0)
        while self._pending:
            by_prompt: dict[tuple[int, ...], list[_Request]] = {}
            for r in self._pending:
                if not r.future.cancelled():
                    by_prompt.setdefault(tuple(r.prompt), []).append(r)
            rows = next(iter(by_prompt.values()), [])[: self.max_batch]
            taken = {id(r) for r in rows}
            self._pending = [
                r for r in self._pending if id(r) not in taken and not r.future.cancelled()
            ]
            if rows:
                await self._run(rows)

    async def _run(self, rows: list[_Request]) -> None:
        """One batch: the requests with one prompt (in the order they came)."""
        for r in rows:
            if not r.started.done():
                r.started.set_result(None)
        try:
            await asyncio.to_thread(self._locked_decode, rows)
            self.batches.append(len(rows))
        except Exception as e:  # the model failed: each episode sees it as its model's error
            for r in rows:
                r.error = e
        for r in rows:
            if r.future.done():
                continue  # its episode was cancelled (a timeout): nobody waits for it
            if r.error is not None:
                r.future.set_exception(r.error)
            else:
                r.future.set_result(r.result or ([], []))

    def _locked_decode(self, rows: list[_Request]) -> None:
        with self._lock:
            self._decode(rows)

    def _decode(self, rows: list[_Request]) -> None:
        import torch
        from transformers import DynamicCache

        n, model = len(rows), self.model
        device = next(model.parameters()).device
        gens = [torch.Generator(device=device).manual_seed(r.seed & (2**63 - 1)) for r in rows]
        out_ids: list[list[int]] = [[] for _ in rows]
        out_lps: list[list[float]] = [[] for _ in rows]
        alive = [True] * n
        cache = DynamicCache(config=model.config)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                ids = torch.tensor([rows[0].prompt], device=device)
                kw = {self._cache_arg: cache}
                logits = model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw).logits[:, -1]
                if n > 1:
                    cache.batch_repeat_interleave(n)
                    logits = logits.expand(n, -1)
                for step in range(max(r.max_new for r in rows)):
                    logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
                    probs = logp.exp()
                    nxt = []
                    for i, r in enumerate(rows):
                        if not alive[i]:
                            nxt.append(self.eos_id)
                            continue
                        tok = int(torch.multinomial(probs[i], 1, generator=gens[i]))
                        out_ids[i].append(tok)
                        out_lps[i].append(float(logp[i, tok]))
                        alive[i] = tok != self.eos_id and step + 1 < r.max_new
                        nxt.append(tok)
                    if not any(alive):
                        break
                    x = torch.tensor([[t] for t in nxt], device=device)
                    logits = model(input_ids=x, use_cache=True, **kw).logits[:, -1]
        finally:
            model.train(was_training)
        for i, r in enumerate(rows):
            r.result = (out_ids[i], out_lps[i])
