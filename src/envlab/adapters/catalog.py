"""The catalogue: every environment envlab can find, by source, loaded or not with the reason.

A source is envlab's own environments (``envlab``) or an adapter of a library people already
use (``rg`` reasoning-gym, ``gym`` gymnasium toy-text, ``ta`` TextArena, ``vf`` verifiers). Each
adapter module has a ``catalog()`` that tries every environment of its library (made, its first
tasks generated) and says which loaded and why the others did not (a download this machine
cannot make, a missing package, an API key): nothing is skipped silently. ``envlab arena
--catalog`` vets what loaded.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from pydantic import BaseModel

from envlab.core import ConfigError

SOURCES: dict[str, str] = {
    "envlab": "",
    "rg": "envlab.adapters.reasoning_gym",
    "gym": "envlab.adapters.gymnasium_text",
    "ta": "envlab.adapters.textarena",
    "vf": "envlab.adapters.verifiers",
}
"""Source name -> the module whose ``catalog()`` lists it (``envlab``: the registered envs)."""

BUILTIN = ("arith", "calc", "triage", "tau-retail", "tau-airline")


class CatalogEntry(BaseModel):
    """What an adapter's ``catalog()`` says of one environment of its library (adapters add
    their own fields: a game's players, the oracle's score)."""

    name: str
    loaded: bool
    reason: str = ""
    seconds: float = 0.0


class Found(BaseModel):
    """One environment of the catalogue."""

    name: str
    """What ``envlab eval``/``vet`` take: ``rg:leg_counting``, ``ta:TicTacToe-v0``, ``calc``."""
    source: str
    loaded: bool
    reason: str = ""
    """Why it did not load (empty when it did)."""
    seconds: float = 0.0
    """How long trying it took."""


def parse_sources(text: str) -> list[str]:
    """``rg,gym,ta`` -> the source names, checked; ``all`` is every source."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    if names == ["all"]:
        return list(SOURCES)
    unknown = [s for s in names if s not in SOURCES]
    if unknown or not names:
        raise ConfigError(
            f"--catalog takes sources from {', '.join(SOURCES)} (or all), comma-separated; "
            f"got {text!r}"
        )
    return names


def find(sources: list[str]) -> list[Found]:
    """Every environment of ``sources``, each loaded or not with the reason."""
    out: list[Found] = []
    for source in sources:
        out += _builtin() if source == "envlab" else _from_adapter(source)
    return out


def _builtin() -> list[Found]:
    from envlab.envs import load_env

    found = []
    for name in BUILTIN:
        t = time.perf_counter()
        try:
            load_env(name).tasks(n=1)
            found.append(Found(name=name, source="envlab", loaded=True))
        except Exception as e:  # an environment that cannot load says why, the rest go on
            found.append(Found(name=name, source="envlab", loaded=False, reason=_why(e)))
        found[-1].seconds = round(time.perf_counter() - t, 3)
    return found


def _from_adapter(source: str) -> list[Found]:
    module = SOURCES[source]
    try:
        entries: list[Any] = importlib.import_module(module).catalog()
    except ImportError as e:
        reason = f"the adapter cannot be imported ({_why(e)}): pip install 'envlab[{source}]'"
        return [Found(name=f"{source}:*", source=source, loaded=False, reason=reason)]
    except Exception as e:  # the library itself failed while listing: said, not skipped
        reason = f"listing the catalogue failed: {_why(e)}"
        return [Found(name=f"{source}:*", source=source, loaded=False, reason=reason)]
    return [
        Found(
            name=e.name,
            source=source,
            loaded=bool(e.loaded),
            reason=str(getattr(e, "reason", "") or ""),
            seconds=float(getattr(e, "seconds", 0.0) or 0.0),
        )
        for e in entries
    ]


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}"
