"""Reading the reward a verifier wrote: ``/logs/verifier/reward.txt`` (a plain decimal number)
and/or ``reward.json`` / ``rewards.json`` (a number, or an object of named numeric components).

Every way a reward file can be wrong raises ``GraderFailed``: the agent's code runs inside the
verifier and may have written or broken the file, so a bad file is never "not counted". The
range of the numbers is checked by the rollout (``validate_reward``), which knows the task's
declared ``reward_range``.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from envlab.core.errors import GraderFailed
from envlab.core.rubric import finite_number

REWARD_FILES = ("reward.json", "rewards.json", "reward.txt")
MAX_REWARD_BYTES = 64 << 10
# ASCII digits only: ``float()`` also takes ``1_0`` (10), Arabic-Indic digits, ``inf``, ``nan``
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def read_small(path: Path) -> str | None:
    """The file's text, never following a link, never more than 64 KiB; None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise GraderFailed(f"the verifier's {path.name} is unreadable ({e})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GraderFailed(f"the verifier's {path.name} is not a regular file")
        data = os.read(fd, MAX_REWARD_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_REWARD_BYTES:
        raise GraderFailed(f"the verifier's {path.name} is larger than {MAX_REWARD_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise GraderFailed(f"the verifier's {path.name} is not UTF-8 text") from None


def _depth(value: Any, limit: int) -> bool:
    """True if ``value`` nests deeper than ``limit`` (iterative: no recursion to exhaust)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if d > limit:
            return True
        if isinstance(v, dict):
            stack += [(x, d + 1) for x in v.values()]
        elif isinstance(v, list):
            stack += [(x, d + 1) for x in v]
    return False


def _parse_json(name: str, text: str) -> tuple[float | None, dict[str, float]]:
    where = f"/logs/verifier/{name}"
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise GraderFailed(f"{where} is not valid JSON ({e}): {text[:200]!r}") from None
    if isinstance(data, int | float) and not isinstance(data, bool):
        return finite_number(data, where), {}
    if not isinstance(data, dict) or not data or _depth(data, 1):
        raise GraderFailed(f"{where} must be a number or a non-empty flat object of numbers")
    components = {str(k): finite_number(v, f"{where}[{k!r}]") for k, v in data.items()}
    n = len(components)
    total = components.get("reward", sum(v / n for v in components.values()))  # no overflow
    return finite_number(total, f"{where} total"), components


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _parse_txt(text: str) -> float:
    t = text.strip()
    if not t:
        raise GraderFailed("the verifier wrote an empty /logs/verifier/reward.txt")
    if not _DECIMAL.fullmatch(t):
        raise GraderFailed(
            f"/logs/verifier/reward.txt holds {t[:100]!r}, not a plain decimal number"
        )
    return finite_number(float(t), "/logs/verifier/reward.txt")


def read_reward_files(logs: Path) -> tuple[float, dict[str, float]]:
    """``(total, components)`` from the reward files in ``logs``. ``GraderFailed`` when none is
    there, any is malformed, or two disagree on the total: the code under test runs in the
    verifier and may have written a second file beside the one test.sh wrote."""
    components: dict[str, float] = {}
    totals: dict[str, float] = {}
    for name in ("reward.json", "rewards.json"):
        text = read_small(logs / name)
        if text is not None:
            totals[name], parsed = _parse_json(name, text)
            components.update(parsed)
    text = read_small(logs / "reward.txt")
    if text is not None:
        totals["reward.txt"] = _parse_txt(text)
    if not totals:
        raise GraderFailed(
            "the verifier wrote no reward: /logs/verifier/reward.txt and reward.json are missing"
        )
    if len(set(totals.values())) > 1:
        said = ", ".join(f"{k} = {v:g}" for k, v in totals.items())
        raise GraderFailed(f"the reward files disagree ({said}); a grade needs one total")
    return next(iter(totals.values())), components
