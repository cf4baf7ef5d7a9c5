"""The hidden side of ``triage``: how tickets are made, what each one truly needs, what each
mistake costs. Nothing here is ever shown to an agent; ``triage.py`` renders the prompt.

A ticket is structured fields plus one line of free text. The text is built from phrases of
a few *signal* classes (a duplicate reference, a follow-up reference, the reach of the
impact, a known-remediable symptom, a non-production environment) and from *neutral* and
*distractor* phrases ("urgent", "please help") that carry no signal at all. ``read_signals``
recovers the signals from the text alone, so ``posterior`` is a function of what the agent
sees: the Bayes action under it is the best any policy can do, exactly.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Literal

OPTIONS: tuple[str, ...] = (
    "page_oncall",
    "open_incident",
    "queue_team",
    "auto_remediate",
    "close_duplicate",
)
"""The K=5 options, in the prompt's order; also the possible outcomes (the true need)."""
PAGE, INCIDENT, QUEUE, AUTO, DUP = range(5)

COST: tuple[tuple[int, ...], ...] = (
    # outcome: page incident queue auto dup     action:
    (0, 30, 50, 50, 55),  # page_oncall: a needless page costs 50-55
    (20, 0, 50, 55, 55),  # open_incident: a needless incident is heavier than a page
    (85, 100, 0, 55, 55),  # queue_team: a missed incident is the worst mistake
    (75, 95, 35, 0, 55),  # auto_remediate
    (95, 100, 35, 40, 0),  # close_duplicate: closing a live outage unseen
)
"""``COST[action][outcome]``; the reward of an episode is ``1 - COST[a][o] / MAX_COST``."""
MAX_COST = 100

SERVICES: dict[str, int] = {
    "checkout": 2,
    "payments": 2,
    "auth": 2,
    "search": 1,
    "inventory": 1,
    "shipping": 1,
    "reporting": 0,
    "notifications": 0,
    "wiki": 0,
}
"""Service -> criticality (2 critical, 1 standard, 0 low); hidden."""
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")
TIERS = ("enterprise", "business", "free", "internal")
SERVER_ERRORS = ("E500", "E502", "E503", "E504", "DB_TIMEOUT")
CLIENT_ERRORS = ("E401", "E404", "E429")
REMEDIABLE = ("DISK_FULL", "CERT_EXPIRING", "QUEUE_BACKLOG", "OOM_KILLED")

Impact = Literal["wide", "some", "cosmetic"]
Ref = Literal["dup", "followup"]

IMPACT_PHRASES: dict[str, tuple[str, ...]] = {
    "wide": (
        "all customers get errors",
        "nobody can complete an order",
        "down for everyone",
        "every request is failing",
        "total outage reported by many users",
        "site-wide failures since a few minutes",
        "no one can sign in",
    ),
    "some": (
        "a few users see errors",
        "intermittent failures",
        "some requests fail now and then",
        "one customer reports failures",
        "sporadic timeouts for a handful of accounts",
        "occasional slow responses",
    ),
    "cosmetic": (
        "cosmetic glitch in the ui",
        "a typo on the settings page",
        "minor layout issue on mobile",
        "feature request from a user",
        "label is misaligned",
        "wrong icon in the footer",
    ),
}
SYMPTOM_PHRASES: dict[str, tuple[str, ...]] = {
    "DISK_FULL": ("disk almost full", "volume running out of space", "no space left on device"),
    "CERT_EXPIRING": (
        "certificate expires soon",
        "tls cert about to expire",
        "ssl certificate renewal needed",
    ),
    "QUEUE_BACKLOG": ("worker stuck", "job queue backed up", "consumers stopped processing"),
    "OOM_KILLED": (
        "process keeps getting oom killed",
        "memory leak with pods restarting",
        "container restarts from memory pressure",
    ),
}
REF_PHRASES: dict[str, tuple[str, ...]] = {
    "dup": (
        "duplicate of",
        "same issue as the one already open in",
        "already reported earlier today in",
        "already tracked and being worked on in",
        "this exact report was filed before as",
        "someone opened the same thing already,",
    ),
    "followup": (
        "follow-up to",
        "regression of",
        "came back after the fix for",
        "reopening",
        "getting worse since",
    ),
}
STAGING_PHRASES = (
    "on staging",
    "in the test environment",
    "in the sandbox cluster",
    "on a dev box",
    "in the qa stack",
)
NEUTRAL_PHRASES = (
    "errors showing up in the logs",
    "alerts firing",
    "latency looks higher than usual",
    "something looks off",
    "noticed after the deploy",
    "seen on the dashboard",
    "reported by support",
    "graphs look strange",
    "started around lunch",
    "checked the runbook already",
)
DISTRACTORS = (
    "urgent",
    "asap",
    "critical!!",
    "please help",
    "hi team",
    "fyi",
    "thanks",
    "high priority",
    "customer is angry",
    "escalated by sales",
    "need eyes on this",
)


@dataclass(frozen=True, slots=True)
class Ticket:
    """The visible content of one ticket (what the prompt shows)."""

    service: str
    severity: str
    customer_tier: str
    error_codes: tuple[str, ...]
    time: str
    text: str


@dataclass(frozen=True, slots=True)
class Signals:
    """What the free text says, in the classes the hidden rules use."""

    impact: Impact | None = None
    ref: Ref | None = None
    symptom: str | None = None
    """The remediable code the text's symptom corresponds to (``DISK_FULL``...)."""
    staging: bool = False


def _pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    """Any of ``phrases`` as whole words (not inside a longer word)."""
    alternatives = "|".join(re.escape(p) for p in phrases)
    return re.compile(rf"(?<![a-z0-9])(?:{alternatives})(?![a-z0-9])")


_IMPACT_RE = {k: _pattern(ps) for k, ps in IMPACT_PHRASES.items()}
_REF_RE = {k: _pattern(ps) for k, ps in REF_PHRASES.items()}
_SYMPTOM_RE = {k: _pattern(ps) for k, ps in SYMPTOM_PHRASES.items()}
_STAGING_RE = _pattern(STAGING_PHRASES)


def read_signals(text: str) -> Signals:
    """The signals of a ticket's free text, read from the text alone."""
    low = text.lower()
    impact = next((k for k, rx in _IMPACT_RE.items() if rx.search(low)), None)
    ref = next((k for k, rx in _REF_RE.items() if rx.search(low)), None)
    symptom = next((k for k, rx in _SYMPTOM_RE.items() if rx.search(low)), None)
    staging = _STAGING_RE.search(low) is not None
    return Signals(impact, ref, symptom, staging)  # type: ignore[arg-type]


def _dist(**weights: float) -> tuple[float, ...]:
    names = {"page": PAGE, "incident": INCIDENT, "queue": QUEUE, "auto": AUTO, "dup": DUP}
    p = [0.0] * len(OPTIONS)
    for k, w in weights.items():
        p[names[k]] = w
    total = sum(p)
    return tuple(x / total for x in p)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def off_hours(time: str) -> bool:
    """18:00-05:59: the on-call carries the pager alone."""
    hour = int(time.split(":")[0])
    return hour < 6 or hour >= 18


SEV_W = {"sev1": 2.0, "sev2": 0.6, "sev3": -0.9, "sev4": -2.2}
CRIT_W = {2: 1.2, 1: 0.0, 0: -1.5}
TIER_W = {"enterprise": 1.0, "business": 0.3, "free": -0.5, "internal": -1.2}
IMPACT_W = {"wide": 1.6, "some": 0.4, None: 0.0, "cosmetic": -2.0}


def _real_problem(t: Ticket, s: Signals) -> tuple[float, ...]:
    """A production problem of uncertain reality: is it real, and is it major?"""
    codes = set(t.error_codes)
    crit = SERVICES[t.service]
    if codes & set(SERVER_ERRORS):
        code_w = 0.9
    elif codes & set(CLIENT_ERRORS):
        code_w = -0.6
    else:
        code_w = -0.3
    logit = (
        SEV_W[t.severity]
        + CRIT_W[crit]
        + TIER_W[t.customer_tier]
        + IMPACT_W[s.impact]
        + code_w
        + (1.0 if s.ref == "followup" else 0.0)
        - 0.9
    )
    p_real = _sigmoid(1.5 * logit)
    p_real = 0.0 if p_real < 0.03 else 1.0 if p_real > 0.97 else p_real
    major = _sigmoid(
        -1.0
        + 2.5 * (s.impact == "wide")
        + 1.2 * (crit == 2)
        + 1.0 * (t.customer_tier == "enterprise")
        + 0.8 * (t.severity == "sev1")
        - 2.2 * off_hours(t.time)
    )
    return _dist(page=p_real * (1 - major), incident=p_real * major, queue=1 - p_real)


def true_posterior(t: Ticket) -> tuple[float, ...]:
    """P(need | ticket) over ``OPTIONS``, by the hidden rules (first that applies)."""
    s = read_signals(t.text)
    codes = set(t.error_codes)
    crit = SERVICES[t.service]
    if s.staging:  # not production: the team's queue, whatever the severity says
        return _dist(queue=1.0) if t.severity != "sev1" else _dist(queue=0.85, page=0.15)
    if s.ref == "dup":
        if t.severity == "sev1" and s.impact == "wide":  # maybe the first report was lost
            return _dist(dup=0.5, page=0.3, incident=0.2)
        if crit == 2 and t.customer_tier == "enterprise":  # a big account: someone looks
            return _dist(dup=0.6, page=0.4)
        return _dist(dup=1.0)
    remediable = codes & set(REMEDIABLE)
    if s.impact != "wide" and (s.symptom or remediable):
        if s.symptom in codes:  # the symptom and its code agree: the runbook applies
            if crit == 2 and t.customer_tier == "enterprise":
                return _dist(auto=0.45, page=0.55)
            return _dist(auto=1.0) if crit < 2 else _dist(auto=0.85, page=0.15)
        if s.symptom:
            return _dist(auto=0.6, queue=0.3, page=0.1)
        if not codes & set(SERVER_ERRORS):
            return _dist(auto=0.4, queue=0.45, page=0.15)
    return _real_problem(t, s)


def posterior(t: Ticket, noise: float = 0.0) -> tuple[float, ...]:
    """``true_posterior`` mixed with the uniform distribution in proportion ``noise``."""
    k = len(OPTIONS)
    return tuple((1 - noise) * p + noise / k for p in true_posterior(t))


def expected_costs(p: tuple[float, ...]) -> tuple[float, ...]:
    """The expected cost of each action under the outcome distribution ``p``."""
    return tuple(sum(pi * c for pi, c in zip(p, row, strict=True)) for row in COST)


def bayes_index(p: tuple[float, ...]) -> int:
    """The action of least expected cost (ties: the first in ``OPTIONS`` order)."""
    costs = expected_costs(p)
    return min(range(len(costs)), key=lambda i: (costs[i], i))


def reward_of(action: int, outcome: int) -> float:
    return 1.0 - COST[action][outcome] / MAX_COST


# --- the generator -----------------------------------------------------------------------------

SCENARIOS = {
    "outage": 0.14,
    "degraded": 0.16,
    "remediable": 0.16,
    "duplicate": 0.16,
    "followup": 0.06,
    "staging": 0.08,
    "minor": 0.13,
    "vague": 0.11,
}
"""The latent kinds of ticket the generator draws; a kind is not a need (the rules decide)."""
_SEV_BY_SCENARIO = {
    "outage": (0.5, 0.35, 0.15, 0.0),
    "degraded": (0.1, 0.45, 0.35, 0.1),
    "remediable": (0.1, 0.3, 0.4, 0.2),
    "followup": (0.2, 0.4, 0.3, 0.1),
    "staging": (0.3, 0.35, 0.2, 0.15),
    "minor": (0.0, 0.1, 0.4, 0.5),
}


def _codes(r: random.Random, scenario: str, symptom: str | None) -> tuple[str, ...]:
    codes: list[str] = []
    server_p = {"outage": 0.85, "degraded": 0.6, "followup": 0.6, "minor": 0.05}.get(scenario, 0.3)
    if r.random() < server_p:
        codes += r.sample(SERVER_ERRORS, r.choice((1, 1, 2)))
    if r.random() < (0.3 if scenario in ("degraded", "minor") else 0.1):
        codes.append(r.choice(CLIENT_ERRORS))
    if symptom is not None and r.random() < 0.7:
        codes.append(symptom)
    elif r.random() < (0.2 if scenario == "remediable" else 0.06):
        codes.append(r.choice(REMEDIABLE))
    return tuple(dict.fromkeys(codes))


def _impact(r: random.Random, scenario: str) -> Impact | None:
    table: dict[str, tuple[tuple[Impact | None, float], ...]] = {
        "outage": (("wide", 0.8), (None, 0.2)),
        "degraded": (("some", 0.7), (None, 0.3)),
        "remediable": (("some", 0.2), ("wide", 0.08), (None, 0.72)),
        "minor": (("cosmetic", 0.7), (None, 0.3)),
        "followup": (("some", 0.4), ("wide", 0.2), (None, 0.4)),
        "vague": (("some", 0.15), ("cosmetic", 0.1), (None, 0.75)),
    }
    rows = table.get(scenario, (("wide", 0.2), ("some", 0.3), ("cosmetic", 0.2), (None, 0.3)))
    return r.choices([k for k, _ in rows], weights=[w for _, w in rows])[0]


def _text(r: random.Random, s: Signals, distractor_rate: float) -> str:
    parts: list[str] = []
    if s.impact is not None:
        parts.append(r.choice(IMPACT_PHRASES[s.impact]))
    if s.symptom is not None:
        parts.append(r.choice(SYMPTOM_PHRASES[s.symptom]))
    if (s.impact is None and s.symptom is None) or r.random() < 0.4:
        parts.append(r.choice(NEUTRAL_PHRASES))
    if s.staging:
        parts.append(r.choice(STAGING_PHRASES))
    r.shuffle(parts)
    if s.ref is not None:
        ticket = f"{r.choice(('OPS', 'INC', 'SUP'))}-{r.randint(1000, 9999)}"
        parts.append(f"{r.choice(REF_PHRASES[s.ref])} {ticket}")
    while r.random() < distractor_rate and len(parts) < 7:
        parts.insert(r.randrange(len(parts) + 1), r.choice(DISTRACTORS))
    text = r.choice((", ", "; ", " - ")).join(parts)
    return text[0].upper() + text[1:]


def draw_ticket(r: random.Random, distractor_rate: float = 0.5) -> tuple[Ticket, Signals]:
    """One ticket drawn with ``r`` (the same ``r`` state, the same ticket) and the signals its
    text was written with (``read_signals(ticket.text)`` reads the same back)."""
    scenario = r.choices(list(SCENARIOS), weights=list(SCENARIOS.values()))[0]
    symptom = r.choice(REMEDIABLE) if scenario == "remediable" else None
    ref: Ref | None = {"duplicate": "dup", "followup": "followup"}.get(scenario)  # type: ignore[assignment]
    signals = Signals(_impact(r, scenario), ref, symptom, scenario == "staging")
    sev_w = _SEV_BY_SCENARIO.get(scenario, (0.2, 0.3, 0.3, 0.2))
    service = r.choice(list(SERVICES))
    if scenario == "outage" and r.random() < 0.5:
        service = r.choice([s for s, c in SERVICES.items() if c == 2])
    ticket = Ticket(
        service=service,
        severity=r.choices(SEVERITIES, weights=sev_w)[0],
        customer_tier=r.choices(TIERS, weights=(0.25, 0.3, 0.3, 0.15))[0],
        error_codes=_codes(r, scenario, symptom),
        time=f"{r.randrange(24):02d}:{r.randrange(0, 60, 5):02d}",
        text=_text(r, signals, distractor_rate),
    )
    return ticket, signals
