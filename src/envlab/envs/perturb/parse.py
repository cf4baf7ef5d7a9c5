"""``timeout=0.1,stale=0.2:2,...``: perturbations from text, with errors that list them all."""

from __future__ import annotations

from collections.abc import Iterable

from envlab.core import ConfigError
from envlab.envs.perturb.base import Perturbation
from envlab.envs.perturb.faults import (
    Latency,
    Malformed,
    RateLimit,
    Stale,
    Timeout,
    Transient,
    Truncate,
)
from envlab.envs.perturb.inject import Inject

PERTURBATIONS: dict[str, type[Perturbation]] = {
    cls.name: cls
    for cls in (Timeout, Transient, Latency, RateLimit, Stale, Truncate, Malformed, Inject)
}
"""Every perturbation by name, in the order the docs list them."""


def usage() -> str:
    """The valid perturbations, one a line: ``name=SYNTAX: what it does``."""
    return "\n".join(f"  {n}={c.syntax}: {c.summary}" for n, c in PERTURBATIONS.items())


def parse_perturbation(text: str) -> Perturbation:
    name, sep, value = text.strip().partition("=")
    name = name.strip()
    cls = PERTURBATIONS.get(name)
    if cls is None or not sep:
        what = f"unknown perturbation {name!r}" if cls is None else f"{name} needs a value"
        raise ConfigError(
            f"{what} in {text.strip()!r}: write NAME=VALUE, comma-separated "
            f"(e.g. timeout=0.1,stale=0.2). Valid perturbations:\n{usage()}"
        )
    try:
        return cls.parse(value)
    except ValueError as e:
        raise ConfigError(
            f"bad perturbation {text.strip()!r}: {e}. Its syntax: {name}={cls.syntax} "
            f"({cls.summary})"
        ) from None


def parse_perturbations(text: str | Iterable[str]) -> list[Perturbation]:
    """``"timeout=0.1,stale=0.2"`` (or a list of such texts) as perturbations, in order; a
    ``ConfigError`` naming the valid ones and their parameters on bad input."""
    parts = [text] if isinstance(text, str) else list(text)
    items = [x for part in parts for x in part.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"no perturbation given. Valid perturbations:\n{usage()}")
    out = [parse_perturbation(x) for x in items]
    names = [p.name for p in out]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(
            f"perturbation {', '.join(dupes)} given twice in {','.join(items)!r}: give each "
            "once (compose different ones, or wrap the perturbed spec again)"
        )
    return out
