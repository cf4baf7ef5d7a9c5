"""From check results to a task's verdict, and from tasks to the environment's score."""

from __future__ import annotations

from collections.abc import Iterable

from envlab.vet.model import SEVERITY, CheckResult, TaskVet, Verdict


def task_verdict(task_id: str, checks: Iterable[CheckResult]) -> TaskVet:
    """The most severe verdict any failing check gives; ``ok`` when none fails."""
    checks = list(checks)
    failing = [c for c in checks if c.status == "fail" and c.verdict is not None]
    failing.sort(key=lambda c: SEVERITY.index(c.verdict or "ok"))
    verdict: Verdict = failing[0].verdict if failing else "ok"  # type: ignore[assignment]
    return TaskVet(
        task_id=task_id,
        verdict=verdict,
        reasons=[f"{c.name}: {c.summary}" for c in failing],
        checks=checks,
    )


def verdict_counts(tasks: Iterable[TaskVet]) -> dict[Verdict, int]:
    counts: dict[Verdict, int] = dict.fromkeys(SEVERITY, 0)
    for t in tasks:
        counts[t.verdict] += 1
    return counts


def quality_score(tasks: list[TaskVet]) -> float:
    """100 x the share of ``ok`` tasks (0 for an environment without tasks)."""
    if not tasks:
        return 0.0
    return 100.0 * sum(t.verdict == "ok" for t in tasks) / len(tasks)
