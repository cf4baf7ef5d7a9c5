"""Where a run goes when ``--out`` is not given: ``runs/<kind>-<names>-<time>``."""

from __future__ import annotations

from pathlib import Path


def default_out_dir(kind: str, *names: str) -> Path:
    """``runs/<kind>-<name>-...-<YYYYmmdd-HHMMSS>``: a run's directory when ``--out`` is not
    given."""
    import time

    parts = [safe_name(n) for n in names]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / "-".join([p for p in (kind, *parts) if p] + [stamp])


def safe_name(name: str) -> str:
    """A name from the command line (``examples/tasks/``, ``mypkg.env:Env``) as part of one
    file name, at most 60 characters."""
    from envlab.vet.plan import safe_name as one_file_name

    return one_file_name(name.rstrip("/"))[-60:]
