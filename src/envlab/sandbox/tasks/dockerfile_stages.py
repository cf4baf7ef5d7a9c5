"""Not a reader: the names ``runtime.py`` still imports from here, re-exported from
``dockerfile`` (the one Dockerfile reader) until that import is changed; then this goes."""

from envlab.sandbox.tasks.dockerfile import Copy as CopyStep
from envlab.sandbox.tasks.dockerfile import parse_stages

__all__ = ["CopyStep", "parse_stages"]
