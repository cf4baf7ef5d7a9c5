"""The torch backend of the local engine: ``TorchEngine``, a GGUF file read by transformers.

No compiler needed: transformers dequantizes the GGUF weights to float32 and torch runs them on
the CPU (``torch.set_num_threads``: the engine's threads), one forward per new token over a KV
cache, under ``torch.inference_mode()``. Slower than llama.cpp, same answers' shape: the
tokenizer, the chat template and the end-of-turn tokens are the file's own (``engine.Engine``
does the rest), so the token ids are llama.cpp's. Sampling draws from a ``torch.Generator``
seeded from the request's seed: greedy at temperature 0, else top-p on the model's
probabilities, then temperature over the kept tokens (llama.cpp's order).

transformers builds the tokenizer from the file's vocabulary and merges; for the pre-tokenizers
it does not know (``tokenizer.ggml.pre``), ``PRE_TOKENIZERS`` sets the one the model's own
tokenizer uses, so that ids match llama.cpp's (SmolLM2's ``smollm``: digits one by one, then
GPT-2's byte-level split).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from envlab.models.engine import Engine
from envlab.models.local import local_extra_error

if TYPE_CHECKING:
    import numpy as np
    import torch


def _smollm() -> Any:
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


PRE_TOKENIZERS: dict[str, Callable[[], Any]] = {"smollm": _smollm}
"""``tokenizer.ggml.pre`` -> the ``tokenizers`` pre-tokenizer, where transformers has none."""


def load_gguf(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """A GGUF file as a ``transformers`` causal LM (float32, dequantized) and its tokenizer,
    with the pre-tokenizer of ``PRE_TOKENIZERS`` where transformers has none: the ids are
    llama.cpp's. What the torch engine runs, and what ``envlab.train.lm_learner`` trains."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a load's bars are noise between a run's own lines
    file = Path(path)
    where, name = str(file.parent), file.name
    with _parsed_once():
        tokenizer: Any = AutoTokenizer.from_pretrained(where, gguf_file=name)
        pre = PRE_TOKENIZERS.get(_gguf_field(file, "tokenizer.ggml.pre") or "")
        if pre is not None:
            tokenizer.backend_tokenizer.pre_tokenizer = pre()
        model: Any = AutoModelForCausalLM.from_pretrained(where, gguf_file=name)
    return model, tokenizer


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the character that stands for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars = {b: chr(b) for b in printable}
    extra = (b for b in range(256) if b not in chars)
    chars.update({b: chr(256 + i) for i, b in enumerate(extra)})
    return {c: b for b, c in chars.items()}


def _sentencepiece_bytes(token: str) -> bytes:
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])  # a byte-fallback token
    return token.replace("\u2581", " ").encode()


def _token_bytes(decoder: Any) -> Callable[[str], bytes]:
    """How a vocabulary entry's name becomes its bytes: byte-level BPE, else sentencepiece."""
    if type(decoder).__name__ != "ByteLevel":
        return _sentencepiece_bytes
    table = _byte_decoder()
    return lambda name: bytes(table[c] for c in name)


class TorchEngine(Engine):
    """A GGUF model run by transformers and torch on the CPU in this process."""

    backend = "torch"

    @classmethod
    def _check_installed(cls) -> None:
        try:
            import gguf  # noqa: F401
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            raise local_extra_error(
                "the torch model engine", f"torch, transformers, gguf: {e}"
            ) from e

    def _load(self, n_ctx: int) -> int:
        self._model, self._tok = load_gguf(self.path)
        self._model.eval()
        # the KV cache's argument: `cache` in recent transformers, `past_key_values` before
        params = inspect.signature(self._model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.n_vocab = int(self._model.config.vocab_size)
        self._pieces = self._piece_table()
        return min(n_ctx, int(self._model.config.max_position_embeddings))

    def _piece_table(self) -> list[bytes]:
        special = {i: t.content for i, t in self._tok.added_tokens_decoder.items()}
        names = self._tok.convert_ids_to_tokens(list(range(len(self._tok))))
        to_bytes = _token_bytes(self._tok.backend_tokenizer.decoder)
        return [
            special[i].encode() if i in special else to_bytes(name) for i, name in enumerate(names)
        ]

    def _chat_template(self) -> str | None:
        return self._tok.chat_template

    def _eos_ids(self) -> set[int]:
        return {int(self._tok.eos_token_id)} if self._tok.eos_token_id is not None else set()

    def tokenize(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def piece(self, token: int) -> bytes:
        return self._pieces[token] if 0 <= token < len(self._pieces) else b""

    def _tokens(
        self, prompt_ids: list[int], *, temperature: float, top_p: float, seed: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        import torch
        from transformers import DynamicCache

        torch.set_num_threads(self.n_threads)
        rng = torch.Generator().manual_seed(seed)
        cache = {self._cache_arg: DynamicCache(config=self._model.config)}  # filled in place
        ids = torch.tensor([prompt_ids])
        while True:
            with torch.inference_mode():
                out = self._model(input_ids=ids, use_cache=True, logits_to_keep=1, **cache)
                logits = out.logits[0, -1].to(torch.float64)
                token = _draw(logits, temperature, top_p, rng)
            yield token, logits.numpy()
            ids = torch.tensor([[token]])


def _draw(logits: torch.Tensor, temperature: float, top_p: float, rng: torch.Generator) -> int:
    """One token: greedy at ``temperature <= 0``; else top-p, then temperature, then a draw."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    kept = torch.argsort(logits, descending=True)
    if top_p < 1.0:
        probs = torch.softmax(logits[kept], dim=0)
        above = torch.cumsum(probs, dim=0) - probs  # the mass of the tokens ranked higher
        # up to and including the token that reaches top_p, and at least one
        kept = kept[: max(1, int((above < top_p).sum()))]
    chosen = torch.multinomial(torch.softmax(logits[kept] / temperature, dim=0), 1, generator=rng)
    return int(kept[chosen])


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """Within the block, each GGUF file is parsed once and each tensor-name map built once.

    transformers parses the file anew for the config, the weights and the tokenizer (SmolLM2's:
    ~6 s each, its 49k-token vocabulary read in pure Python) and rebuilds gguf's tensor-name map
    for every module it walks (~8 s): 50 s to load a 135M model, 14 s with this (profiled with
    pyinstrument; bench/models/torch_load.py). Both are looked up on the ``gguf`` module when
    called, so the block sets cached ones there and puts the originals back; it also silences
    the conversion's own progress bar (a ``tqdm`` of its module), noise between a run's lines."""
    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    real_reader, real_map, real_tqdm = gguf.GGUFReader, gguf.get_tensor_name_map, hf_gguf.tqdm
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[assignment,misc]
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_map)
    hf_gguf.tqdm = functools.partial(real_tqdm, disable=True)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map  # type: ignore[misc]
        hf_gguf.tqdm = real_tqdm


def _gguf_field(path: Any, key: str) -> str | None:
    """A string field of a GGUF file's metadata."""
    from gguf import GGUFReader

    field = GGUFReader(str(path)).get_field(key)
    return None if field is None else str(field.contents())
