"""``StoreError`` messages: what the OS refused (a full disk, a size limit), what was corrupt."""

from __future__ import annotations

import errno
from pathlib import Path

from pydantic import ValidationError

from envlab.core import StoreError


def store_error(e: OSError, path: Path, what: str) -> StoreError:
    """A ``StoreError`` that says what happened to ``path`` and what to do about it."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        kind = "the disk is full" if e.errno == errno.ENOSPC else "the disk quota is exhausted"
        return StoreError(
            f"cannot {what} {path}: {kind} (the filesystem of {path.parent}). Episodes recorded "
            "before are kept and a partial record is cut off: free some space, then run again "
            "with --resume."
        )
    if e.errno == errno.EFBIG:
        return StoreError(
            f"cannot {what} {path}: the file size limit was reached (ulimit -f, or the "
            "filesystem's largest file). Episodes recorded before are kept: raise the limit, "
            "then run again with --resume."
        )
    return StoreError(f"cannot {what} {path}: {e.strerror or e}")


def first_error(e: Exception) -> str:
    """The first problem of a failed parse, on one line."""
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "top level"
        return f"{err['type']} at {where}: {err['msg']}"
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__
