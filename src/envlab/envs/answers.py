"""Tolerant parsing of a final numeric answer from free text, that the agent wrote itself.

``extract_number(text, not_from=[prompt])`` reads the agent's final number, but never one that
the agent copied from the prompt: text it repeats from what it was shown (the expression
``10 / 2``, a sentence with a number in it) is masked before parsing, so an agent that echoes
the prompt earns nothing. A number the agent states itself counts even when the prompt also
contains it (``5`` for ``(5 + 3) - 3``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from fractions import Fraction

_NUM = r"[-−]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-−]?\.\d+"
_NUM_RE = re.compile(_NUM)
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_MARKER_RE = re.compile(
    r"(?:####|final answer|answer\s*(?:is|:|=)|result\s*(?:is|:|=)|=)\s*[:=]?", re.IGNORECASE
)

# Tokens for finding echoes: numbers, words and arithmetic symbols; other punctuation and spaces
# are ignored. A minus touching the digits and not following an operand is the number's sign.
_TOKEN_RE = re.compile(
    r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+|[^\W\d_]+|[-−+*/×÷^=()%$]"
)
_SIGN_AFTER = frozenset(" \t\n([{=:")
_OPS = str.maketrans({"−": "-", "×": "*", "÷": "/"})
ECHO_TOKENS = 2
"""A run of this many tokens or more, with a number among them, copied from the prompt is an
echo: "10 / 2", "3 boxes", "- 3". A lone number is the agent's own statement."""
_MASK = " … "


def to_number(token: str) -> float | None:
    t = token.replace("−", "-").replace("$", "").replace(",", "").replace(" ", "")
    try:
        if "/" in t:
            return float(Fraction(t))
        return float(t)
    except (ValueError, ZeroDivisionError):
        return None


Token = tuple[tuple[str, object], int, int, bool]
"""``(key, start, end, is_number)``: numbers are keyed by value, words without case."""


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    for m in _TOKEN_RE.finditer(text):
        raw, start, end = m.group(), m.start(), m.end()
        first = raw[0]
        if first.isdigit() or first == ".":
            if out and out[-1][0][1] == "-" and out[-1][2] == start:
                sign_at = out[-1][1]
                if sign_at == 0 or text[sign_at - 1] in _SIGN_AFTER:
                    out.pop()
                    raw, start = "-" + raw, sign_at
            out.append((("n", to_number(raw)), start, end, True))
        elif first.isalpha():
            out.append((("w", raw.lower()), start, end, False))
        else:
            out.append((("o", raw.translate(_OPS)), start, end, False))
    return out


def _grams(source: str, n: int) -> frozenset[tuple[tuple[str, object], ...]]:
    """The ``n``-token runs of ``source`` (cached: every sample of a task has the same prompt)."""
    return _cached_grams(source, n) if len(source) <= 65536 else _grams_of(source, n)


def _grams_of(source: str, n: int) -> frozenset[tuple[tuple[str, object], ...]]:
    keys = [t[0] for t in _tokens(source)]
    return frozenset(tuple(keys[i : i + n]) for i in range(len(keys) - n + 1))


_cached_grams = functools.lru_cache(maxsize=4096)(_grams_of)

_DIGITS_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+")
"""The number alternatives of ``_TOKEN_RE``: the same digit runs (no other token has digits)."""


def _number_keys(source: str) -> frozenset[tuple[str, object]]:
    """``_numbers_of(source)``, cached for sources of up to 64 KiB (a task's prompt)."""
    return _cached_numbers(source) if len(source) <= 65536 else _numbers_of(source)


def _numbers_of(source: str) -> frozenset[tuple[str, object]]:
    """Every key a number token of ``source`` can have: each value with either sign (whether a
    minus is the number's sign depends on what precedes it; both keep this a superset)."""
    keys: set[tuple[str, object]] = set()
    for raw in _DIGITS_RE.findall(source):
        value = to_number(raw)
        if value is not None:
            keys.update((("n", value), ("n", -value)))
    return frozenset(keys)


_cached_numbers = functools.lru_cache(maxsize=4096)(_numbers_of)


def mask_echoes(text: str, sources: Iterable[str], n: int = ECHO_TOKENS) -> str:
    """``text`` with every span copied from ``sources`` that carries a number blanked out.

    A span is copied when ``n`` or more consecutive tokens of ``text`` (numbers compared by
    value, words without case, whitespace and punctuation ignored) occur in that order in a
    source."""
    toks = _tokens(text)
    numbers = {t[0] for t in toks if t[3]}
    if not numbers:
        return text
    # an echo carries a number: only a source holding one of the text's numbers can be copied
    # (a cheap scan; most prompts share none with the answer, and are never tokenized)
    sources = [s for s in sources if not numbers.isdisjoint(_number_keys(s))]
    all_grams = [g for g in (_grams(source, n) for source in sources) if g]
    if not all_grams:
        return text
    grams = all_grams[0] if len(all_grams) == 1 else frozenset().union(*all_grams)
    copied = [False] * len(toks)
    for i in range(len(toks) - n + 1):
        window = toks[i : i + n]
        if any(t[3] for t in window) and tuple(t[0] for t in window) in grams:
            copied[i : i + n] = [True] * n
    parts: list[str] = []
    pos = i = 0
    while i < len(toks):
        if not copied[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(toks) and copied[j + 1]:
            j += 1
        parts += [text[pos : toks[i][1]], _MASK]
        pos, i = toks[j][2], j + 1
    parts.append(text[pos:])
    return "".join(parts)


def extract_number(text: str | None, *, not_from: Iterable[str] = ()) -> float | None:
    """The final numeric answer in ``text``, the agent's own.

    Looks, in order, for ``\\boxed{x}``, the number after the last answer marker ("####",
    "answer is", "Answer:", "="), then the last number in the text. Accepts thousands
    separators, currency signs, decimals, fractions and a unicode minus. Text copied from
    ``not_from`` (the prompt the agent was shown) is masked first (``mask_echoes``).
    """
    if not text:
        return None
    text = mask_echoes(text, not_from)
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
