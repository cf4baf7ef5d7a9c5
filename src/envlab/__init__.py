"""envlab: build, vet, measure and train on environments for LLM agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("envlab")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
