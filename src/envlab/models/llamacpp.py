"""The llama.cpp backend of the local engine (``llama-cpp-python``): ``LlamaCppEngine``.

llama.cpp contexts are not thread-safe: requests take turns under the engine's lock. Everything
that does not depend on the library (rendering, stop strings, logprobs, the response) is
``engine.Engine``'s, and ``local`` picks the backend and shares engines; this module loads the
file, reads its tokenizer and chat template, and samples with llama.cpp's own sampler chain.

llama-cpp-python (built from source: a C/C++ compiler and cmake) and the server's FastAPI and
uvicorn are the optional extra ``envlab[local]``; ``require_local`` says how to install it
(and names the torch engine, which needs no compiler: ``models.torch_engine``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from envlab.models.engine import DEFAULT_MAX_TOKENS, Engine, Generation
from envlab.models.local import (
    LOCAL_INSTALL_HINT,
    LOCAL_MODULES,
    local_extra_error,
    require_local,
    shared_engine,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "LOCAL_INSTALL_HINT",
    "LOCAL_MODULES",
    "Generation",
    "LlamaCppEngine",
    "local_extra_error",
    "require_local",
    "shared_engine",
]


class LlamaCppEngine(Engine):
    """A GGUF model run by llama.cpp in this process."""

    backend = "llamacpp"

    @classmethod
    def _check_installed(cls) -> None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise local_extra_error("the local model engine", f"llama-cpp-python: {e}") from e

    def _load(self, n_ctx: int) -> int:
        from llama_cpp import Llama

        self._llm: Any = Llama(
            model_path=str(self.path),
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            logits_all=False,
            verbose=False,
        )
        self.n_vocab = self._llm.n_vocab()
        return int(self._llm.n_ctx())

    def _chat_template(self) -> str | None:
        return self._llm.metadata.get("tokenizer.chat_template")

    def _eos_ids(self) -> set[int]:
        return {self._llm.token_eos()}

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode(), add_bos=False, special=True))

    def piece(self, token: int) -> bytes:
        import ctypes

        import llama_cpp

        vocab = self._llm._model.vocab
        size = 64
        while True:  # a negative length is the size the piece needs (long runs of spaces)
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(vocab, token, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def _tokens(
        self, prompt_ids: list[int], *, temperature: float, top_p: float, seed: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        import llama_cpp
        import numpy as np

        llm = self._llm
        llm.set_seed(seed)
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
            ptr = llama_cpp.llama_get_logits_ith(ctx, -1)  # the logits `token` was drawn from
            yield int(token), np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)
