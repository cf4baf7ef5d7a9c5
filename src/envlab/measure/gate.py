"""Gating tasks: tasks a run declares it must pass, reported apart from the mean.

A mean hides which tasks failed; some tasks (a safety check, a smoke test, a customer's
must-have) are requirements, not samples. A gating task passes when it has at least one scored
sample and every scored sample passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, Field


class GateResult(BaseModel):
    """Outcome of the must-pass tasks of a run."""

    must_pass: list[str]
    passed_tasks: list[str] = Field(default_factory=list)
    failed_tasks: list[str] = Field(default_factory=list)
    """At least one scored sample fell below the pass threshold."""
    unscored_tasks: list[str] = Field(default_factory=list)
    """Not in the run, or only infrastructure/environment errors: the gate cannot be judged."""
    passed: bool | None
    """True when every gating task passed, False when any failed, None when undecided."""

    def describe(self) -> str:
        total = len(self.must_pass)
        text = f"{len(self.passed_tasks)}/{total} must-pass tasks passed"
        if self.failed_tasks:
            shown = ", ".join(self.failed_tasks[:5]) + (
                " ..." if len(self.failed_tasks) > 5 else ""
            )
            text += f"; FAILED: {shown}"
        if self.unscored_tasks:
            text += f"; {len(self.unscored_tasks)} not scored"
        if self.passed is None:
            text += " (undecided: rerun the unscored tasks)"
        return text


def evaluate_gate(must_pass: Iterable[str], passes: Mapping[str, Sequence[bool]]) -> GateResult:
    """Judge ``must_pass`` task ids given the pass/fail outcome of each scored sample per task."""
    ids = list(dict.fromkeys(must_pass))
    passed, failed, unscored = [], [], []
    for task in ids:
        outcomes = passes.get(task, ())
        if not outcomes:
            unscored.append(task)
        elif all(outcomes):
            passed.append(task)
        else:
            failed.append(task)
    verdict: bool | None = False if failed else (None if unscored else True)
    return GateResult(
        must_pass=ids,
        passed_tasks=passed,
        failed_tasks=failed,
        unscored_tasks=unscored,
        passed=verdict,
    )
