"""A local GGUF model run by llama.cpp (``llama-cpp-python``), answering chat requests.

One ``LlamaCppEngine`` holds one model in memory; llama.cpp contexts are not thread-safe, so
requests take turns under a lock (the server queues them before that, in ``models.turns``, so
that the wait is not on an agent's clock). It renders the request with the model's own chat
template plus Hermes tools (``prompt``), samples token by token, and returns an OpenAI chat
completion with the prompt and completion token ids and the logprob of every generated token
(the log-softmax of the model's logits, before temperature and top-p: what vLLM reports by
default). ``active`` is the generation in progress and ``recent`` the last ones, each with why
it ended: what tests and diagnostics read instead of timing.

llama-cpp-python (built from source: a C/C++ compiler and cmake) and the server's FastAPI and
uvicorn are the optional extra ``envlab[local]``; ``require_local`` says how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

DEFAULT_MAX_TOKENS = 512

LOCAL_MODULES = ("llama_cpp", "jinja2", "fastapi", "uvicorn")
"""What the extra ``envlab[local]`` installs (import names)."""
LOCAL_INSTALL_HINT = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF' pip install 'envlab[local]' "
    "(builds llama-cpp-python from source: needs a C/C++ compiler and cmake)"
)


def local_extra_error(what: str, missing: str) -> ConfigError:
    """The error for ``what`` (e.g. ``envlab serve-model``) run without ``envlab[local]``."""
    return ConfigError(
        f"{what} needs the optional extra envlab[local], which is not installed ({missing}); "
        f"install it with: {LOCAL_INSTALL_HINT}. Remote models need no extra: "
        "--agent openai:MODEL@URL"
    )


def require_local(what: str) -> None:
    """Raise ``ConfigError`` now if ``envlab[local]`` is missing (finds modules, imports none)."""
    missing = [m for m in LOCAL_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise local_extra_error(what, "missing: " + ", ".join(missing))


@dataclass(slots=True)
class Generation:
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    """``stop`` (end of turn or a stop string), ``length`` (max_tokens), ``cancelled``."""
    max_tokens: int = 0


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class LlamaCppEngine:
    """A GGUF model in this process. ``chat(request)`` is blocking; call it from a thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        model_id: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise local_extra_error("the local model engine", f"llama-cpp-python: {e}") from e
        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(f"model file {self.path} does not exist; give the path to a .gguf")
        self.model_id = model_id or self.path.stem
        self.n_threads = n_threads or _threads()
        t0 = time.perf_counter()
        self._llm = Llama(
            model_path=str(self.path),
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            logits_all=False,
            verbose=False,
        )
        self.load_s = time.perf_counter() - t0
        self.n_ctx = self._llm.n_ctx()
        self.n_vocab = self._llm.n_vocab()
        self.template = ChatTemplate(self._llm.metadata.get("tokenizer.chat_template"))
        self._eog = {self._llm.token_eos()}
        for special in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            ids = self._llm.tokenize(special.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                self._eog.add(ids[0])
        self._lock = threading.Lock()
        self._weights_hash: str | None = None
        self.active: Generation | None = None
        self.recent: deque[Generation] = deque(maxlen=32)

    @property
    def weights_hash(self) -> str:
        if self._weights_hash is None:
            self._weights_hash = file_sha256(self.path)
        return self._weights_hash

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode(), add_bos=False, special=True))

    def piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens as their text, e.g. ``<|im_end|>``)."""
        return bytes(self._llm._model.detokenize([token], special=True))

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
        stops = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
        one_call = bool(tools) and request.parallel_tool_calls is False
        top_k = min(max(request.top_logprobs or 0, 0), 20) if request.logprobs else 0
        with self._lock:
            gen = self._generate(
                prompt_ids,
                max_tokens=min(asked, room),
                temperature=1.0 if request.temperature is None else request.temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                seed=request.seed,
                stops=stops,
                stop_after_tool_call=one_call,
                top_k=top_k,
                cancel=cancel,
                ignore_eos=request.ignore_eos,
            )
        return self._response(request, rendered.prefill, prompt_ids, gen, tools)

    def _generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        stops: list[str],
        stop_after_tool_call: bool,
        top_k: int,
        cancel: threading.Event | None,
        ignore_eos: bool = False,
    ) -> Generation:
        gen = self.active = Generation(max_tokens=max_tokens)
        try:
            self._sample(
                gen,
                prompt_ids,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
                stops=stops,
                stop_after_tool_call=stop_after_tool_call,
                top_k=top_k,
                cancel=cancel,
                ignore_eos=ignore_eos,
            )
        finally:
            self.active = None
            self.recent.append(gen)
        return gen

    def _sample(
        self,
        gen: Generation,
        prompt_ids: list[int],
        *,
        temperature: float,
        top_p: float,
        seed: int | None,
        stops: list[str],
        stop_after_tool_call: bool,
        top_k: int,
        cancel: threading.Event | None,
        ignore_eos: bool,
    ) -> None:
        import llama_cpp
        import numpy as np

        llm = self._llm
        llm.set_seed(seed if seed is not None else random.getrandbits(31))
        text = bytearray()
        ctx = llm._ctx.ctx
        for token in llm.generate(
            prompt_ids,
            temp=max(temperature, 0.0),
            top_p=top_p,
            top_k=0,
            min_p=0.0,
            repeat_penalty=1.0,
            reset=True,
        ):
            ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
            logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)
            peak = logits.max()
            log_z = peak + math.log(float(np.exp(logits - peak).sum()))
            gen.ids.append(int(token))
            gen.logprobs.append(float(logits[token] - log_z))
            if top_k:
                best = np.argpartition(-logits, top_k)[:top_k]
                best = best[np.argsort(-logits[best])]
                gen.top.append([(int(t), float(logits[t] - log_z)) for t in best])
            if token in self._eog and not ignore_eos:
                gen.finish_reason = "stop"
                break
            text += self.piece(token)
            decoded = text.decode("utf-8", errors="ignore")
            hit = next((s for s in stops if s and s in decoded), None)
            if hit is not None:
                text = bytearray(decoded[: decoded.index(hit)].encode())
                gen.finish_reason = "stop"
                break
            if stop_after_tool_call and decoded.rstrip().endswith(TOOL_CALL_CLOSE):
                gen.finish_reason = "stop"
                break
            if cancel is not None and cancel.is_set():
                gen.finish_reason = "cancelled"
                break
            if len(gen.ids) >= gen.max_tokens:
                break
        gen.text = text.decode("utf-8", errors="replace")

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


_engines: dict[tuple[str, int, int | None], LlamaCppEngine] = {}
_engines_lock = threading.Lock()


def shared_engine(
    path: str | Path,
    *,
    model_id: str | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
) -> LlamaCppEngine:
    """One engine per model file and settings in this process, loaded on first use."""
    key = (str(Path(path).resolve()), n_ctx, n_threads)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = LlamaCppEngine(path, model_id=model_id, n_ctx=n_ctx, n_threads=n_threads)
            _engines[key] = engine
        return engine
