"""Where a run goes when ``--out`` is not given: ``runs/<kind>-<names>-<time>``."""

from __future__ import annotations

from pathlib import Path


def default_out_dir(kind: str, *names: str) -> Path:
    """``runs/<kind>-<name>-...-<YYYYmmdd-HHMMSS>``: a run's directory when ``--out`` is not
    given."""
    import time

    from envlab.runs import safe_name

    parts = [safe_name(n, 60) for n in names]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / "-".join([p for p in (kind, *parts) if p] + [stamp])
