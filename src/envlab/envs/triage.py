"""``triage``: route an operations ticket to one of five options; hidden rules, asymmetric costs.

One step: the agent reads a ticket (structured fields and a line of free text) and answers
one option name. The ticket's true need is drawn, per task and seeded, from a posterior the
agent never sees (``triage_rules``); the reward is ``1 - COST[answer][need] / MAX_COST``. An
answer that names no option, or more than one, scores 0 (the ``one_option`` gate). The oracle
plays the Bayes action (least expected cost under the posterior): the best any policy that
sees the prompt can do, so "fraction of the best achievable" is exact.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import random
import re
import sys
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envlab.core import (
    Action,
    Component,
    ConfigError,
    EnvSpec,
    GradingContext,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolEnv,
)
from envlab.envs import triage_rules
from envlab.envs.triage_rules import (
    MAX_COST,
    OPTIONS,
    Ticket,
    bayes_index,
    draw_ticket,
    expected_costs,
    posterior,
    reward_of,
)

SPLITS = ("train", "dev", "test")
HEADER = "Route this operations ticket to exactly one of the options."
OPTIONS_LINE = "Options: " + ", ".join(OPTIONS)
FOOTER = "Answer with exactly one option name."

SYSTEM_PROMPT = (
    "You triage operations tickets. Read the ticket's fields and its text, then choose the one "
    "response it needs:\n"
    "- page_oncall: wake the on-call engineer now; an urgent production problem that needs "
    "a person immediately.\n"
    "- open_incident: declare an incident; a real, customer-facing problem that needs a "
    "coordinated response (incident channel, status page, several teams).\n"
    "- queue_team: put it in the owning team's queue; real but not urgent, or not in "
    "production.\n"
    "- auto_remediate: run the automated runbook; a known symptom that automation fixes.\n"
    "- close_duplicate: close it; it repeats a ticket that is already open.\n"
    "Reply with the option name only, for example: queue_team"
)


def render_prompt(t: Ticket) -> str:
    """The observation of a ticket, in the fixed line format the decision model parses."""
    codes = ", ".join(t.error_codes) or "none"
    return (
        f"{HEADER}\n\n"
        f"service: {t.service}\nseverity: {t.severity}\ncustomer_tier: {t.customer_tier}\n"
        f"error_codes: {codes}\ntime: {t.time}\ntext: {t.text}\n\n"
        f"{OPTIONS_LINE}\n{FOOTER}"
    )


_LINE = re.compile(r"^(service|severity|customer_tier|error_codes|time|text): (.*)$", re.M)


def parse_prompt(prompt: str) -> Ticket:
    """The ticket a triage prompt shows (the inverse of ``render_prompt``)."""
    fields = dict(_LINE.findall(prompt))
    missing = {"service", "severity", "customer_tier", "error_codes", "time", "text"} - set(fields)
    if missing:
        raise ConfigError(f"not a triage prompt: no {', '.join(sorted(missing))} line")
    codes = fields["error_codes"]
    return Ticket(
        service=fields["service"],
        severity=fields["severity"],
        customer_tier=fields["customer_tier"],
        error_codes=() if codes == "none" else tuple(c.strip() for c in codes.split(",")),
        time=fields["time"],
        text=fields["text"],
    )


# --- reading the answer ---------------------------------------------------------------------

_SUSPECT, _FOREIGN = "\ue000", "\ue001"
"""The two non-ASCII word characters a normalized answer holds: ``_SUSPECT`` may pass for a
Latin letter (a letter of another script or of Latin beyond a-z, a symbol named a letter
such as 🅿, a control, a private or unassigned code point), ``_FOREIGN`` is a letter or digit
of a script with nothing shaped like a-z (``_FOREIGN_SCRIPTS``)."""
_FOREIGN_SCRIPTS = (
    *("CJK", "IDEOGRAPHIC", "HIRAGANA", "KATAKANA", "HANGUL"),
    *("ARABIC", "HEBREW", "DEVANAGARI", "THAI"),
)
_REORDERING = frozenset(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))
"""Bidi embeddings, overrides and isolates: they change the order a reader sees."""
_MAX_DISTINCT, _MAX_GROWTH = 4096, 4
"""Past these an answer is not an option name, and its reading stops (the bound on the
grader's work): more distinct non-ASCII characters, or compatibility forms that spell more
than ``_MAX_GROWTH`` characters each on average (U+FDFA is 18)."""

_W = f"a-z0-9{_SUSPECT}{_FOREIGN}"  # word characters; anything else separates words
_LOOKS = {"l": "[l1i]", "o": "[o0]", "m": "(?:m|rn)"}  # ASCII look-alikes: oncaIl, 0pen, tearn
_FORMS = {
    "page_oncall": "page+on*call",
    "open_incident": "open+incident",
    "queue_team": "queue+team",
    "auto_remediate": "auto*remediate",
    "close_duplicate": "close+duplicate",
}
"""How each option is written: its words, ``+`` one or more separators, ``*`` any number."""
assert tuple(_FORMS) == OPTIONS
_SPELLED = {"+": f"[^{_W}]++", "*": f"[^{_W}]*+", **_LOOKS}
_NAMES = re.compile(
    f"(?<![{_W}])(?:"
    + "|".join(f"(?P<{o}>{''.join(_SPELLED.get(c, c) for c in f)})" for o, f in _FORMS.items())
    + f")(?![{_W}])"
)
_DISGUISE = re.compile(  # a word mixing a-z and another script, or a suspect and another letter
    f"[a-z][0-9{_SUSPECT}]*+{_FOREIGN}|{_FOREIGN}[0-9{_SUSPECT}]*+[a-z]"
    f"|{_SUSPECT}[0-9]*+[a-z{_SUSPECT}{_FOREIGN}]|[a-z{_FOREIGN}][0-9]*+{_SUSPECT}"
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _mark(ch: str) -> str:
    """What the non-ASCII character ``ch`` of an NFKD, case-folded answer is read as."""
    category = unicodedata.category(ch)
    if category in ("Cf", "Mn", "Me"):  # invisible: zero-width, soft hyphen, bidi; accents
        return ""
    if category[0] in "ZP":  # spaces, punctuation: separators
        return ch
    name = unicodedata.name(ch, "")
    if category[0] == "S":  # symbols separate words, unless they show a letter (🅿, 🇵)
        return _SUSPECT if "LETTER" in name else ch
    foreign = (category[0] in "LN" or category == "Mc") and name.startswith(_FOREIGN_SCRIPTS)
    return _FOREIGN if foreign else _SUSPECT


def _normalized(text: str) -> tuple[str, bool]:
    """``text`` as the gate reads it, and whether it is disguised (``chosen_option``).

    NFKD (fullwidth, ligatures, super- and subscripts, math letters to plain letters: NFKC's
    folding, decomposed), case-folded, without invisible characters and accents; every
    other non-ASCII character a separator or one of the two markers (``_mark``)."""
    s = unicodedata.normalize("NFKD", text)
    if len(s) <= _MAX_GROWTH * len(text):
        s = unicodedata.normalize("NFKD", s.casefold())
        chars = {c for c in set(s) if not c.isascii()}
        if len(chars) <= _MAX_DISTINCT:
            s = s.translate({ord(c): _mark(c) for c in chars}).lower()
            return s, not _REORDERING.isdisjoint(chars) or _DISGUISE.search(s) is not None
    return _NON_ASCII.sub(_SUSPECT, text.lower()), True


@dataclass(frozen=True, slots=True)
class _Reading:
    options: tuple[str, ...]
    disguised: bool


@functools.lru_cache(maxsize=1)  # the gate and the cost read the same answer: one pass
def _read(text: str) -> _Reading:
    s, disguised = (text.lower(), False) if text.isascii() else _normalized(text)
    names = (m.lastgroup for m in _NAMES.finditer(s))
    return _Reading(tuple(dict.fromkeys(n for n in names if n is not None)), disguised)


def named_options(text: str | None) -> list[str]:
    """The distinct options an answer names, in order of first mention: whole words, any case,
    with spaces, hyphens, underscores or other punctuation between their parts (``Queue-Team``,
    ``page on call``), read after Unicode normalization (``_normalized``): a fullwidth or
    accented letter is its plain letter, a zero-width space or a soft hyphen is not there, and
    ``l``, ``o``, ``m`` may be written as the look-alike ``I``/``1``, ``0``, ``rn``."""
    return list(_read(text or "").options)


def chosen_option(text: str | None) -> str | None:
    """The option an answer picks: the only one it names, else ``None``.

    Also ``None`` when the answer may show a reader an option the parser cannot read (a
    homoglyph attack): a word that mixes a-z with a letter of any other script (``pаge`` with
    a Cyrillic ``а``), a word with two letters that may pass for Latin ones (``сӏоѕе``,
    ``ᴘᴀɢᴇ``, ``🅿🅰🅶🅴``), bidi controls that reorder the text, or an answer past the
    reading's bounds (``_MAX_DISTINCT``, ``_MAX_GROWTH``). The gate cannot tell which options
    such an answer shows, so it counts as naming no single one and scores 0: conservative, at
    the price of an honest answer that writes a word in Greek or Cyrillic. Single letters
    (``Δ``) and scripts with nothing shaped like a-z, apart from a-z words (``答案: queue_team``),
    are read as any prose."""
    reading = _read(text or "")
    if reading.disguised or len(reading.options) != 1:
        return None
    return reading.options[0]


# --- grading ----------------------------------------------------------------------------------


def _one_option(ctx: GradingContext) -> float:
    return float(chosen_option(ctx.final_answer) is not None)


def _cost(ctx: GradingContext) -> float:
    option = chosen_option(ctx.final_answer)
    if option is None:
        return 0.0
    return reward_of(OPTIONS.index(option), OPTIONS.index(ctx.task.answer["outcome"]))


class TriageEpisode(ToolEnv):
    """One ticket, answered with one option name; graded by the cost of that option against
    the ticket's hidden outcome. No tools: a tool call is not an answer."""

    rubric = Rubric(
        [
            Component(
                "one_option",
                _one_option,
                gate=True,
                description="the answer names exactly one of the options",
            ),
            Component(
                "cost",
                _cost,
                description="1 - COST[answer][outcome] / MAX_COST (asymmetric costs)",
            ),
        ]
    )

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=bayes_action(task))]


# --- the exact optimum --------------------------------------------------------------------------


def _posterior_of(task: Task) -> tuple[float, ...]:
    p = task.answer["posterior"]
    return tuple(float(p[o]) for o in OPTIONS)


def expected_reward(task: Task, option: str) -> float:
    """The expected reward of answering ``option`` to ``task``, under its hidden posterior."""
    if option not in OPTIONS:
        raise ConfigError(f"unknown triage option {option!r}; the options are {list(OPTIONS)}")
    return 1.0 - expected_costs(_posterior_of(task))[OPTIONS.index(option)] / MAX_COST


def bayes_action(task: Task) -> str:
    """The option of least expected cost for ``task`` (what the oracle answers)."""
    return OPTIONS[bayes_index(_posterior_of(task))]


def realized_reward(task: Task, option: str) -> float:
    """The reward answering ``option`` earns on ``task`` (its drawn outcome)."""
    return reward_of(OPTIONS.index(option), OPTIONS.index(task.answer["outcome"]))


def expected_optimum(tasks: Iterable[Task]) -> float:
    """The mean expected reward of the Bayes action: the best achievable on ``tasks``."""
    values = [expected_reward(t, bayes_action(t)) for t in tasks]
    return sum(values) / len(values)


def realized_optimum(tasks: Iterable[Task]) -> float:
    """The mean reward the oracle scores on ``tasks`` (Bayes action vs the drawn outcomes)."""
    values = [realized_reward(t, bayes_action(t)) for t in tasks]
    return sum(values) / len(values)


def random_expected_reward(tasks: Iterable[Task]) -> float:
    """The mean expected reward of the uniform random policy over the options."""
    values = [sum(expected_reward(t, o) for o in OPTIONS) / len(OPTIONS) for t in tasks]
    return sum(values) / len(values)


# --- the spec -----------------------------------------------------------------------------------


class TriageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(2000, ge=1)
    """Tasks per split (``--tasks`` takes fewer)."""
    noise: float = Field(0.0, ge=0.0, le=0.5)
    """Mix each posterior with the uniform distribution in this proportion (a lower optimum)."""
    distractor_rate: float = Field(0.5, ge=0.0, le=0.9)
    """Chance to add each further distractor phrase ("urgent", "please help") to a ticket's text."""


def _outcome(p: tuple[float, ...], r: random.Random) -> str:
    """One outcome drawn from ``p`` (the last possible one if rounding leaves ``u`` past 1)."""
    u, acc = r.random(), 0.0
    for option, pi in zip(OPTIONS, p, strict=True):
        acc += pi
        if u < acc:
            return option
    return [o for o, pi in zip(OPTIONS, p, strict=True) if pi > 0][-1]


class TriageEnv(EnvSpec):
    """Operations tickets routed to one of five options; hidden rules, asymmetric costs."""

    id = "triage"
    description = (
        "Route ops tickets to 1 of 5 options; hidden rules, asymmetric costs, exact optimum."
    )
    Config = TriageConfig
    environment = TriageEpisode
    default_limits = Limits(max_steps=1)
    config: TriageConfig

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        if split not in SPLITS:
            raise ConfigError(f"triage has splits {', '.join(SPLITS)}; got {split!r}")
        cfg = self.config
        tasks = [self._task(split, seed, i) for i in range(cfg.size if n is None else n)]
        return TaskSet(tasks, seed=seed, name=self.id)

    def _task(self, split: str, seed: int, i: int) -> Task:
        cfg = self.config
        ticket, _ = draw_ticket(random.Random(f"triage:{split}:{seed}:{i}"), cfg.distractor_rate)
        p = posterior(ticket, cfg.noise)
        outcome = _outcome(p, random.Random(f"triage:{split}:{seed}:{i}:outcome"))
        answer: dict[str, Any] = {
            "outcome": outcome,
            "posterior": dict(zip(OPTIONS, p, strict=True)),
        }
        task = Task(
            id=f"triage-{split}-{seed}-{i:05d}",
            prompt=render_prompt(ticket),
            answer=answer,
            metadata={"options": list(OPTIONS)},
            split=split,
        )
        # what the oracle's Bayes action scores against the drawn outcome, for vet's oracle check
        task.metadata["reference_reward"] = realized_reward(task, bayes_action(task))
        return task

    def _compute_hash(self) -> str:
        """The classes' source and config, plus both modules' whole source: a change to a
        rule, a cost, a phrase or the answer parser is a new environment."""
        h = hashlib.sha256(super()._compute_hash().encode())
        for module in (triage_rules, sys.modules[__name__]):
            h.update(inspect.getsource(module).encode())
        return h.hexdigest()[:16]


__all__ = [
    "OPTIONS",
    "SPLITS",
    "SYSTEM_PROMPT",
    "TriageConfig",
    "TriageEnv",
    "TriageEpisode",
    "bayes_action",
    "chosen_option",
    "expected_optimum",
    "expected_reward",
    "named_options",
    "parse_prompt",
    "random_expected_reward",
    "realized_optimum",
    "realized_reward",
    "render_prompt",
]
