"""envlab: build, vet, measure and train on environments for LLM agents."""

from typing import Any

__all__ = ["__version__", "evaluate", "run_tour", "vet_env"]

APP = ("evaluate", "run_tour", "vet_env")
"""envlab from Python (``envlab.app``), imported on first use like ``__version__``."""


def __getattr__(name: str) -> Any:
    """``__version__`` is read from the installed metadata on first use (it costs an import of
    ``importlib.metadata`` that ``envlab --help`` does not need); ``evaluate``, ``vet_env`` and
    ``run_tour`` come from ``envlab.app``."""
    if name in APP:
        from envlab import app

        return getattr(app, name)
    if name != "__version__":
        raise AttributeError(f"module 'envlab' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("envlab")
    except PackageNotFoundError:  # running from a source tree without installation
        value = "0.0.0+unknown"
    globals()["__version__"] = value
    return value
