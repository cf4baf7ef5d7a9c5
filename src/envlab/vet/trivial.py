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
) -> tuple[dict[str, float], list[str]]:
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


def trivial_strategies(
    tasks: list[Task], evidence: dict[str, TaskEvidence]
) -> tuple[EnvCheck, dict[str, CheckResult]]:
    from envlab.measure.stats import proportion_ci

    n = len(tasks)
    strategies = sorted(
        {p for ev in evidence.values() for p in ev.by_probe if p.startswith("constant_")}
        | {"echo_prompt"}
    )
    chance = sum(1 / len(options(t.prompt)) if options(t.prompt) else 0.0 for t in tasks) / max(
        n, 1
    )
    beaten: dict[str, dict[str, float]] = {}
    partial: dict[str, dict[str, float]] = {}
    rates: dict[str, float] = {}
    earned_on: dict[str, set[str]] = {}
    for s in strategies:
        passed = {t.id for t in tasks if is_pass(_first(evidence[t.id], s), PASS_THRESHOLD)}
        rates[s] = len(passed) / max(n, 1)
        low = proportion_ci(len(passed), max(n, 1), method="exact").low if n else 0.0
        if low > chance + TRIVIAL_MARGIN:
            beaten[s] = {"pass_rate": rates[s], "lower_95": round(low, 4)}
            earned_on.setdefault(s, set()).update(passed)
        stats, earned = _partial_credit(tasks, evidence, s)
        if stats["lower_bound"] > 0:
            partial[s] = {**stats, "earned_on": earned[:50]}  # type: ignore[dict-item]
            earned_on.setdefault(s, set()).update(earned)
    flagged = sorted(set(beaten) | set(partial))
    parts = [f"{s} passes ({beaten[s]['pass_rate']:.0%})" for s in sorted(beaten)] + [
        f"{s} earns partial credit (mean {p['mean_above_noop']:g} above doing nothing, "
        f"{1 - PARTIAL_ALPHA:.0%} lower bound {p['lower_bound']:g}, on {p['tasks']} tasks)"
        for s, p in sorted(partial.items())
    ]
    env = EnvCheck(
        name="trivial_strategies",
        status="fail" if flagged else "pass",
        summary=(
            "trivial strategies score: " + "; ".join(parts)
            if flagged
            else f"no trivial strategy beats chance ({chance:.0%}) or earns partial credit"
        ),
        evidence={
            "chance": chance,
            "pass_rates": rates,
            "beating_chance": beaten,
            "partial_credit": partial,
        },
    )
    per: dict[str, CheckResult] = {}
    for t in tasks:
        won = [s for s in flagged if t.id in earned_on.get(s, set())]
        if won:
            got = {s: _first(evidence[t.id], s) for s in won}
            per[t.id] = result(
                "trivial_strategies",
                "fail",
                f"{', '.join(f'{s} scores {r:g}' for s, r in got.items())}: a strategy that "
                "scores across the environment",
                strategies=won,
                rewards=got,
            )
        else:
            per[t.id] = result(
                "trivial_strategies", "pass", "no trivial strategy that scores here earns on it"
            )
    return env, per
