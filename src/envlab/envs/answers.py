"""Tolerant parsing of a final numeric answer from free text."""

from __future__ import annotations

import math
import re
from fractions import Fraction

_NUM = r"[-−]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-−]?\.\d+"
_NUM_RE = re.compile(_NUM)
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_MARKER_RE = re.compile(
    r"(?:####|final answer|answer\s*(?:is|:|=)|result\s*(?:is|:|=)|=)\s*[:=]?", re.IGNORECASE
)


def to_number(token: str) -> float | None:
    t = token.replace("−", "-").replace("$", "").replace(",", "").replace(" ", "")
    try:
        if "/" in t:
            return float(Fraction(t))
        return float(t)
    except (ValueError, ZeroDivisionError):
        return None


def extract_number(text: str | None) -> float | None:
    """The final numeric answer in ``text``.

    Looks, in order, for ``\\boxed{x}``, the number after the last answer marker ("####",
    "answer is", "Answer:", "="), then the last number in the text. Accepts thousands
    separators, currency signs, decimals, fractions and a unicode minus.
    """
    if not text:
        return None
    boxed = _BOXED_RE.findall(text)
    if boxed:
        nums = _NUM_RE.findall(boxed[-1])
        if nums:
            return to_number(nums[-1])
    markers = list(_MARKER_RE.finditer(text))
    if markers:
        tail = text[markers[-1].end() :]
        m = _NUM_RE.search(tail)
        if m:
            return to_number(m.group())
    nums = _NUM_RE.findall(text)
    return to_number(nums[-1]) if nums else None


def numbers_equal(got: float | None, want: float, rel: float = 1e-6, abs_tol: float = 1e-6) -> bool:
    if got is None or math.isnan(got):
        return False
    return math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol)


def format_number(x: float) -> str:
    """``19.0`` -> ``"19"``; ``2.5`` -> ``"2.5"``; rounding noise removed."""
    if math.isfinite(x) and float(x).is_integer():
        return str(int(x))
    return f"{x:.10g}"


def answer_text(answer: object) -> str:
    """A hidden answer as an agent would write it: numbers without ``.0``, others as ``str``."""
    if isinstance(answer, float | int) and not isinstance(answer, bool):
        return format_number(float(answer))
    return str(answer)
