"""Trivial strategies on answer-matching (Python) environments: constant answers (``0``, ``1``,
``yes``, ``no``, the most common answer) and the echoed prompt, on every task.

Two tests, both one-sided, across the environment:

- **full passes**: a strategy whose pass rate's 95% lower bound (Clopper-Pearson) exceeds chance
  (1/k for tasks with k detectable options, else 0) by ``TRIVIAL_MARGIN``; a constant answer
  that happens to be right on a few tasks is a coincidence, not a defect;
- **partial credit**: credit short of a pass, against the no-op agent's on the same task (the
  paired difference; a full pass counts as no difference here, the first test judges those).
  A strategy is flagged when the one-sided ``1 - PARTIAL_ALPHA`` lower bound (Student's t) of
  the mean difference is above 0: echoing the prompt earns 0.8 on a tenth of the tasks.

The tasks a flagged strategy earned on (passes, or credit above the no-op floor) are ``trivial``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from envlab.core import Task
from envlab.measure import is_pass
from envlab.vet.checks import PASS_THRESHOLD, TaskEvidence, _scored, result
from envlab.vet.model import CheckResult, EnvCheck
from envlab.vet.probes import options

TRIVIAL_MARGIN = 0.05
"""A strategy's full passes fail the check when the 95% lower bound of its pass rate exceeds
chance by more than this."""
PARTIAL_ALPHA = 0.01
"""Significance of the one-sided test that a strategy's partial credit exceeds the no-op's."""


def _first(ev: TaskEvidence, probe: str) -> float:
    return (_scored(ev.by_probe.get(probe, [])) or [0.0])[0]


def _lower_bound(diffs: list[float], alpha: float) -> float:
    """One-sided ``1 - alpha`` lower bound of the mean (Student's t; the mean itself when the
    differences do not vary)."""
    from scipy import stats

    n = len(diffs)
    mean = sum(diffs) / n
    if n < 2:
        return mean
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    if sd == 0:
        return mean
    return mean - float(stats.t.ppf(1 - alpha, n - 1)) * sd / math.sqrt(n)


def _partial_credit(
    tasks: list[Task], evidence: dict[str, TaskEvidence], strategy: str
) -> tuple[dict[str, Any], list[str]]:
    """The test's evidence, and the tasks where the strategy earned credit above the floor."""
    diffs, earned = [], []
    for t in tasks:
        ev = evidence[t.id]
        base, r = _first(ev, "noop"), _first(ev, strategy)
        credit = base if is_pass(r, PASS_THRESHOLD) else r
        diffs.append(credit - base)
        if credit > base + 1e-9:
            earned.append(t.id)
    low = _lower_bound(diffs, PARTIAL_ALPHA) if diffs else 0.0
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    stats = {"mean_above_noop": round(mean, 4), "lower_bound": round(low, 4), "tasks": len(earned)}
    return stats, earned


@dataclass(slots=True)
class Judgement:
    """Strategies judged across the environment: which beat chance, which earn partial credit,
    and the tasks each earned on."""

    beaten: dict[str, dict[str, float]] = field(default_factory=dict)
    partial: dict[str, dict[str, Any]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    chances: dict[str, float] = field(default_factory=dict)
    earned_on: dict[str, set[str]] = field(default_factory=dict)

    @property
    def flagged(self) -> list[str]:
        return sorted(set(self.beaten) | set(self.partial))

    def describe(self) -> str:
        return "; ".join(
            [f"{s} passes ({b['pass_rate']:.0%})" for s, b in sorted(self.beaten.items())]
            + [
                f"{s} earns partial credit (mean {p['mean_above_noop']:g} above doing nothing, "
                f"{1 - PARTIAL_ALPHA:.0%} lower bound {p['lower_bound']:g}, on {p['tasks']} tasks)"
                for s, p in sorted(self.partial.items())
            ]
        )

    def evidence(self) -> dict[str, Any]:
        return {
            "chance": self.chances,
            "pass_rates": self.rates,
            "beating_chance": self.beaten,
            "partial_credit": self.partial,
        }

    def won_on(self, task_id: str) -> list[str]:
        return [s for s in self.flagged if task_id in self.earned_on.get(s, set())]

    @staticmethod
    def rewards(ev: TaskEvidence, strategies: list[str]) -> dict[str, float]:
        return {s: _first(ev, s) for s in strategies}


def judge_strategies(
    tasks: list[Task],
    evidence: dict[str, TaskEvidence],
    chances: dict[str, float],
    excused: dict[str, set[str]] | None = None,
) -> Judgement:
    """Each strategy (a probe name, with the pass rate it may reach by chance) by the two
    tests of this module's docstring; the tasks ``excused`` for a strategy do not count."""
    from envlab.measure.stats import proportion_ci

    n = len(tasks)
    j = Judgement(chances=dict(chances))
    for s, chance in chances.items():
        skip = (excused or {}).get(s, set())
        ran = [t for t in tasks if evidence[t.id].by_probe.get(s) and t.id not in skip]
        if not ran:
            continue
        passed = {t.id for t in ran if is_pass(_first(evidence[t.id], s), PASS_THRESHOLD)}
        j.rates[s] = len(passed) / len(ran)
        low = proportion_ci(len(passed), len(ran), method="exact").low if n else 0.0
        if low > chance + TRIVIAL_MARGIN:
            j.beaten[s] = {"pass_rate": j.rates[s], "lower_95": round(low, 4)}
            j.earned_on.setdefault(s, set()).update(passed)
        stats, earned = _partial_credit(ran, evidence, s)
        if stats["lower_bound"] > 0:
            j.partial[s] = {**stats, "earned_on": earned[:50]}
            j.earned_on.setdefault(s, set()).update(earned)
    return j


def trivial_strategies(
    tasks: list[Task], evidence: dict[str, TaskEvidence], extra: list[str] | None = None
) -> tuple[EnvCheck, dict[str, CheckResult]]:
    """The constant answers, the echoed prompt and the ``extra`` strategies (``vet.strategies``),
    judged against the chance that a task's options give."""
    n = len(tasks)
    strategies = sorted(
        {p for ev in evidence.values() for p in ev.by_probe if p.startswith("constant_")}
        | {"echo_prompt"}
        | set(extra or [])
    )
    chance = sum(1 / len(options(t.prompt)) if options(t.prompt) else 0.0 for t in tasks) / max(
        n, 1
    )
    j = judge_strategies(tasks, evidence, dict.fromkeys(strategies, chance))
    env = EnvCheck(
        name="trivial_strategies",
        status="fail" if j.flagged else "pass",
        summary=(
            "trivial strategies score: " + j.describe()
            if j.flagged
            else f"no trivial strategy beats chance ({chance:.0%}) or earns partial credit"
        ),
        evidence={**j.evidence(), "chance": chance},
    )
    per: dict[str, CheckResult] = {}
    for t in tasks:
        won = j.won_on(t.id)
        if won:
            got = j.rewards(evidence[t.id], won)
            per[t.id] = result(
                "trivial_strategies",
                "fail",
                f"{', '.join(f'{s} scores {r:g}' for s, r in got.items())}: a strategy that "
                "scores across the environment",
                strategies=won,
                rewards=got,
                answers=_answers(evidence[t.id], won),
            )
        else:
            per[t.id] = result(
                "trivial_strategies", "pass", "no trivial strategy that scores here earns on it"
            )
    return env, per


def _answers(ev: TaskEvidence, strategies: list[str]) -> dict[str, str]:
    """What each strategy answered (its last message with text), cut for the evidence."""
    out: dict[str, str] = {}
    for s in strategies:
        for t in ev.by_probe.get(s, [])[:1]:
            texts = [m.get("content") for m in t.messages if m.get("role") == "assistant"]
            last = next((x for x in reversed(texts) if x), "")
            out[s] = str(last)[:300]
    return out
