"""Which local engine runs a GGUF model, how to install one, and the engines a process shares.

There are two backends of ``engine.Engine``:

- ``llamacpp`` (``models.llamacpp.LlamaCppEngine``): llama-cpp-python, built from source (a C/C++
  compiler and cmake), in the optional extra ``envlab[local]``;
- ``torch`` (``models.torch_engine.TorchEngine``): transformers and torch on the CPU reading the
  same GGUF file; no compiler, slower.

``ENVLAB_ENGINE=llamacpp`` or ``ENVLAB_ENGINE=torch`` chooses; unset, it is llama.cpp when
``llama_cpp`` is importable, else torch when ``torch``, ``transformers`` and ``gguf`` are, else a
``ConfigError`` naming both installs (``engine_backend``; it finds modules, imports none).
Both tokenize with the model's own tokenizer, so the token ids of a request are the same
whichever runs it; the sampled tokens are not (other arithmetic, other random numbers).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

from envlab.core import ConfigError
from envlab.models.engine import Engine

ENGINE_ENV = "ENVLAB_ENGINE"
BACKENDS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("llama_cpp",),
    "torch": ("torch", "transformers", "gguf"),
}
"""Each backend and the modules it imports, in the order ``engine_backend`` tries them."""
SERVER_MODULES = ("jinja2", "fastapi", "uvicorn")
"""What every backend needs besides its own modules: chat templates and the server."""
LOCAL_MODULES = ("llama_cpp", *SERVER_MODULES)
"""What the extra ``envlab[local]`` installs (import names)."""
LOCAL_INSTALL_HINT = (
    "CMAKE_ARGS='-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF' pip install 'envlab[local]' "
    "(builds llama-cpp-python from source: needs a C/C++ compiler and cmake)"
)
TORCH_INSTALL_HINT = (
    "pip install 'envlab[embedded]' "
    "(torch's CPU wheels: --extra-index-url https://download.pytorch.org/whl/cpu)"
)


def local_extra_error(what: str, missing: str) -> ConfigError:
    """The error for ``what`` (e.g. ``envlab serve-model``) run without a local engine."""
    return ConfigError(
        f"{what} needs the optional extra envlab[local] or the torch engine's packages, which "
        f"are not installed ({missing}); install the extra with: {LOCAL_INSTALL_HINT}; or, with "
        f"no compiler (a slower engine): {TORCH_INSTALL_HINT}. Remote models need no extra: "
        "--agent openai:MODEL@URL"
    )


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _unknown(backend: str) -> ConfigError:
    return ConfigError(
        f"{backend!r} is not a local model engine ({ENGINE_ENV}); use one of: "
        + ", ".join(BACKENDS)
    )


def engine_backend() -> str:
    """``$ENVLAB_ENGINE``, else the first backend whose modules are installed (imports none)."""
    chosen = os.environ.get(ENGINE_ENV, "").strip().lower()
    if chosen:
        if chosen not in BACKENDS:
            raise _unknown(chosen)
        return chosen
    for name, modules in BACKENDS.items():
        if all(_installed(m) for m in modules):
            return name
    raise local_extra_error(
        "the local model engine", "missing: llama_cpp, or torch, transformers and gguf"
    )


def require_local(what: str) -> None:
    """Raise ``ConfigError`` now if the local engine cannot run (finds modules, imports none)."""
    missing = [m for m in SERVER_MODULES if not _installed(m)]
    try:
        backend = engine_backend()
    except ConfigError:
        missing.append("llama_cpp (or torch, transformers and gguf)")
    else:
        missing += [m for m in BACKENDS[backend] if not _installed(m)]
    if missing:
        raise local_extra_error(what, "missing: " + ", ".join(missing))


def new_engine(
    path: str | Path,
    *,
    backend: str | None = None,
    model_id: str | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
) -> Engine:
    """Load ``path`` with ``backend`` (default: ``engine_backend()``)."""
    backend = backend or engine_backend()
    cls: type[Engine]
    if backend == "torch":
        from envlab.models.torch_engine import TorchEngine as cls
    elif backend == "llamacpp":
        from envlab.models.llamacpp import LlamaCppEngine as cls
    else:
        raise _unknown(backend)
    return cls(path, model_id=model_id, n_ctx=n_ctx, n_threads=n_threads)


_engines: dict[tuple[str, str, int, int | None], Engine] = {}
_engines_lock = threading.Lock()


def shared_engine(
    path: str | Path,
    *,
    backend: str | None = None,
    model_id: str | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
) -> Engine:
    """One engine per backend, model file and settings in this process, loaded on first use."""
    backend = backend or engine_backend()
    key = (backend, str(Path(path).resolve()), n_ctx, n_threads)
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = new_engine(
                path, backend=backend, model_id=model_id, n_ctx=n_ctx, n_threads=n_threads
            )
            _engines[key] = engine
        return engine
