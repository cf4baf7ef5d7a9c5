"""The local chat engine, whichever library runs the model: ``Engine``, the part they share.

An ``Engine`` holds one GGUF model in memory and answers chat requests; ``chat(request)`` is
blocking (call it from a thread) and requests take turns under a lock (the server queues them
before that, in ``models.turns``, so that the wait is not on an agent's clock). It renders the
request with the model's own chat template plus Hermes tools (``prompt``), samples token by
token, and returns an OpenAI chat completion with the prompt and completion token ids and the
logprob of every generated token (the log-softmax of the model's logits, before temperature and
top-p: what vLLM reports by default). ``active`` is the generation in progress and ``recent``
the last ones, each with why it ended: what tests and diagnostics read instead of timing.

A backend implements only loading the file, ``tokenize``, ``piece``, the chat template, the
end-of-sequence ids and ``_tokens`` (a sampler yielding each token with the full-vocabulary
logits it was drawn from); everything else is here. The backends (llama.cpp, torch) and which
one runs are ``models.local``'s.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from envlab.core import ConfigError
from envlab.models.prompt import ChatTemplate
from envlab.models.toolcalls import TOOL_CALL_CLOSE, parse_hermes
from envlab.models.weights import file_sha256
from envlab.models.wire import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    Choice,
    ChoiceLogprobs,
    FunctionCall,
    TokenLogprob,
    TopLogprob,
    Usage,
    WireToolCall,
)

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_TOKENS = 512


@dataclass(slots=True)
class Generation:
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    """``stop`` (end of turn or a stop string), ``length`` (max_tokens), ``cancelled``."""
    max_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Decoding:
    """How one request samples (resolved from the request; ``seed`` always set)."""

    temperature: float
    top_p: float
    seed: int
    stops: list[str]
    stop_after_tool_call: bool
    top_k: int
    """How many most likely tokens to report per position (``top_logprobs``)."""
    ignore_eos: bool


def _threads() -> int:
    """``OMP_NUM_THREADS`` when set (as torch and llama.cpp users set it for processes that
    share the cores), else every core this process may use."""
    wanted = os.environ.get("OMP_NUM_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class Engine(ABC):
    """A GGUF model in this process. ``chat(request)`` is blocking; call it from a thread."""

    backend: ClassVar[str]
    n_vocab: int

    def __init__(
        self,
        path: str | Path,
        *,
        model_id: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> None:
        self._check_installed()
        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(f"model file {self.path} does not exist; give the path to a .gguf")
        self.model_id = model_id or self.path.stem
        self.n_threads = n_threads or _threads()
        t0 = time.perf_counter()
        self.n_ctx = self._load(n_ctx)
        self.load_s = time.perf_counter() - t0
        self.template = ChatTemplate(self._chat_template())
        self._eog = self._eos_ids()
        for special in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            ids = self.tokenize(special)
            if len(ids) == 1:
                self._eog.add(ids[0])
        self._lock = threading.Lock()
        self._weights_hash: str | None = None
        self.active: Generation | None = None
        self.recent: deque[Generation] = deque(maxlen=32)

    # -- what a backend implements ------------------------------------------------------------

    @classmethod
    @abstractmethod
    def _check_installed(cls) -> None:
        """Raise ``ConfigError`` (``local_extra_error``) if the backend's library is missing."""

    @abstractmethod
    def _load(self, n_ctx: int) -> int:
        """Load ``self.path`` (with ``self.n_threads``); set ``n_vocab``; return the context."""

    @abstractmethod
    def _chat_template(self) -> str | None:
        """The GGUF file's chat template (``tokenizer.chat_template``), if it has one."""

    @abstractmethod
    def _eos_ids(self) -> set[int]:
        """The model's end-of-sequence ids (the end-of-turn specials are added to them)."""

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """The model tokenizer's ids of ``text``: no BOS added, special tokens parsed."""

    @abstractmethod
    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens as their text, e.g. ``<|im_end|>``)."""

    @abstractmethod
    def _tokens(
        self, prompt_ids: list[int], *, temperature: float, top_p: float, seed: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Sample after ``prompt_ids``, without end: each token, with the float64 logits (the
        whole vocabulary) it was drawn from. Greedy at ``temperature <= 0``; else top-p on the
        model's probabilities, then temperature over the kept tokens (llama.cpp's order)."""

    # -- the same for every backend -----------------------------------------------------------

    @property
    def weights_hash(self) -> str:
        if self._weights_hash is None:
            self._weights_hash = file_sha256(self.path)
        return self._weights_hash

    def chat(self, request: ChatRequest, cancel: threading.Event | None = None) -> ChatResponse:
        """Answer one chat request. Raises ``ConfigError`` for a request it cannot serve."""
        if request.n != 1:
            raise ConfigError(f"n={request.n} is not supported; ask for one choice (n=1)")
        if not request.messages:
            raise ConfigError("messages is empty; send at least one message")
        tools = request.tools or None
        rendered = self.template.render(request.messages, tools, request.tool_choice)
        prompt_ids = self.tokenize(rendered.text)
        room = self.n_ctx - len(prompt_ids)
        if room < 1:
            raise ConfigError(
                f"the prompt has {len(prompt_ids)} tokens and the context holds {self.n_ctx}; "
                "shorten the conversation or serve the model with a larger --n-ctx"
            )
        asked = request.max_completion_tokens or request.max_tokens or DEFAULT_MAX_TOKENS
        decoding = Decoding(
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            seed=request.seed if request.seed is not None else random.getrandbits(31),
            stops=[request.stop] if isinstance(request.stop, str) else list(request.stop or []),
            stop_after_tool_call=bool(tools) and request.parallel_tool_calls is False,
            top_k=min(max(request.top_logprobs or 0, 0), 20) if request.logprobs else 0,
            ignore_eos=request.ignore_eos,
        )
        with self._lock:
            gen = self.active = Generation(max_tokens=min(asked, room))
            try:
                self._sample(gen, prompt_ids, decoding, cancel)
            finally:
                self.active = None
                self.recent.append(gen)
        return self._response(request, rendered.prefill, prompt_ids, gen, tools)

    def _sample(
        self,
        gen: Generation,
        prompt_ids: list[int],
        s: Decoding,
        cancel: threading.Event | None,
    ) -> None:
        text = bytearray()
        tokens = self._tokens(prompt_ids, temperature=s.temperature, top_p=s.top_p, seed=s.seed)
        with contextlib.closing(tokens):
            for token, logits in tokens:
                self._record(gen, token, logits, s.top_k)
                if token in self._eog and not s.ignore_eos:
                    gen.finish_reason = "stop"
                    break
                text += self.piece(token)
                decoded = text.decode("utf-8", errors="ignore")
                hit = next((stop for stop in s.stops if stop and stop in decoded), None)
                if hit is not None:
                    text = bytearray(decoded[: decoded.index(hit)].encode())
                    gen.finish_reason = "stop"
                    break
                if s.stop_after_tool_call and decoded.rstrip().endswith(TOOL_CALL_CLOSE):
                    gen.finish_reason = "stop"
                    break
                if cancel is not None and cancel.is_set():
                    gen.finish_reason = "cancelled"
                    break
                if len(gen.ids) >= gen.max_tokens:
                    break
        gen.text = text.decode("utf-8", errors="replace")

    @staticmethod
    def _record(gen: Generation, token: int, logits: np.ndarray, top_k: int) -> None:
        """Append ``token`` and its logprob (and the ``top_k`` best) under ``logits``."""
        import numpy as np

        peak = logits.max()
        log_z = peak + math.log(float(np.exp(logits - peak).sum()))
        gen.ids.append(int(token))
        gen.logprobs.append(float(logits[token] - log_z))
        if top_k:
            best = np.argpartition(-logits, top_k)[:top_k]
            best = best[np.argsort(-logits[best])]
            gen.top.append([(int(t), float(logits[t] - log_z)) for t in best])

    def _token_logprob(
        self, token: int, logprob: float, top: list[tuple[int, float]]
    ) -> TokenLogprob:
        raw = self.piece(token)
        return TokenLogprob(
            token=raw.decode("utf-8", errors="replace"),
            logprob=logprob,
            bytes=list(raw),
            top_logprobs=[
                TopLogprob(
                    token=self.piece(t).decode("utf-8", errors="replace"),
                    logprob=lp,
                    bytes=list(self.piece(t)),
                )
                for t, lp in top
            ],
        )

    def _response(
        self,
        request: ChatRequest,
        prefill: str,
        prompt_ids: list[int],
        gen: Generation,
        tools: list[dict[str, Any]] | None,
    ) -> ChatResponse:
        text = prefill + gen.text
        content: str | None = text
        tool_calls: list[WireToolCall] | None = None
        finish = gen.finish_reason
        if tools:
            parsed = parse_hermes(text, lenient=False)
            if parsed.calls:
                content = parsed.content or None
                tool_calls = [
                    WireToolCall(
                        id=f"call_{uuid.uuid4().hex[:24]}",
                        function=FunctionCall(
                            name=c.name,
                            arguments=c.arguments
                            if isinstance(c.arguments, str)
                            else json.dumps(c.arguments, ensure_ascii=False),
                        ),
                    )
                    for c in parsed.calls
                ]
                finish = "tool_calls"
        logprobs = None
        if request.logprobs:
            tops = gen.top or [[] for _ in gen.ids]
            logprobs = ChoiceLogprobs(
                content=[
                    self._token_logprob(t, lp, top)
                    for t, lp, top in zip(gen.ids, gen.logprobs, tops, strict=True)
                ]
            )
        return ChatResponse(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            created=int(time.time()),
            model=self.model_id,
            choices=[
                Choice(
                    message=AssistantMessage(content=content, tool_calls=tool_calls),
                    finish_reason=finish,
                    logprobs=logprobs,
                    token_ids=gen.ids,
                )
            ],
            usage=Usage(
                prompt_tokens=len(prompt_ids),
                completion_tokens=len(gen.ids),
                total_tokens=len(prompt_ids) + len(gen.ids),
            ),
            prompt_token_ids=prompt_ids,
        )
