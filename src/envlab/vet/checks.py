"""The checks of ``envlab vet``: each reads the trajectories of the probe episodes of one task
(and, for leaks, what the task shows an agent) and returns a ``CheckResult`` with evidence.

Thresholds are documented in ``docs/vet.md``; they are module constants here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envlab.core import Status, Task, Trajectory
from envlab.vet.leak import Hit
from envlab.vet.model import CHECKS, CheckResult, CheckStatus, Verdict

PASS_THRESHOLD = 1.0
"""A reward at or above this is a pass (the oracle must reach it)."""
FLAKE_ALPHA = 0.05
"""Confidence of the Clopper-Pearson upper bound on the grader's flake rate."""
TOO_EASY, TOO_HARD = 0.9, 0.1
"""Difficulty band of the trainability check: pass rates outside it give little signal."""
NETWORK_WORDS = re.compile(
    r"\b(curl|wget|pip3? install|npm install|apt-get|git clone|urllib|requests\.|httpx|"
    r"socket\.create_connection|https?://)",
)


@dataclass(slots=True)
class TaskEvidence:
    task: Task
    kind: str
    """``taskfolder`` or ``python``."""
    by_probe: dict[str, list[Trajectory]] = field(default_factory=dict)
    tests_text: str = ""
    network_declared: bool = False
    leak_hits: list[Hit] = field(default_factory=list)
    leak_needles: int = 0
    leak_error: str | None = None

    def rewards(self, probe: str) -> list[float | None]:
        return [t.reward for t in self.by_probe.get(probe, [])]


def result(
    name: str, status: CheckStatus, summary: str, verdict: Verdict | None = None, **evidence: Any
) -> CheckResult:
    if status == "fail" and verdict is None:
        verdict = CHECKS[name]
    return CheckResult(
        name=name,
        status=status,
        summary=summary,
        evidence=evidence,
        verdict=verdict if status == "fail" else None,
    )


def _scored(trajs: Sequence[Trajectory]) -> list[float]:
    return [t.reward for t in trajs if t.scored and t.reward is not None]


def noop_baseline(ev: TaskEvidence) -> float:
    """What doing nothing earns: the no-op agent's and the empty-answer agent's best reward."""
    return max(
        _scored(ev.by_probe.get("noop", [])) + _scored(ev.by_probe.get("empty_answer", [])),
        default=0.0,
    )


def check_noop(ev: TaskEvidence) -> CheckResult:
    probes = ["noop", "empty_answer"] if ev.kind == "taskfolder" else ["noop"]
    got = {p: ev.rewards(p) for p in probes if p in ev.by_probe}
    scored = {p: [r for r in v if r is not None] for p, v in got.items()}
    if not any(scored.values()):
        return result("noop", "n/a", "no scored no-op episode (see verifier_health)", rewards=got)
    bad = {p: v for p, v in scored.items() if any(r > 0 for r in v)}
    if bad:
        names = ", ".join(bad)
        return result("noop", "fail", f"doing nothing scores above 0 ({names})", rewards=got)
    return result("noop", "pass", "doing nothing scores 0", rewards=got)


def check_oracle(ev: TaskEvidence) -> CheckResult:
    trajs = ev.by_probe.get("oracle", [])
    if not trajs:
        return result("oracle", "n/a", "no reference solution to run")
    rewards = [t.reward for t in trajs]
    statuses = [t.status.value for t in trajs]
    scored = _scored(trajs)
    passed = sum(r >= PASS_THRESHOLD - 1e-9 for r in scored)
    if not scored:
        return result(
            "oracle", "fail", "no oracle run could be graded", rewards=rewards, statuses=statuses
        )
    if passed < len(trajs):
        return result(
            "oracle",
            "fail",
            f"the reference solution passed {passed}/{len(trajs)} fresh runs",
            rewards=rewards,
            statuses=statuses,
            errors=[t.error for t in trajs if t.error][:3],
        )
    return result("oracle", "pass", f"passed {passed}/{len(trajs)} fresh runs", rewards=rewards)


def check_regrade(ev: TaskEvidence) -> CheckResult:
    from envlab.measure.stats import proportion_ci

    first = next((t for t in ev.by_probe.get("oracle", []) if "after_grade" in t.info), None)
    if first is None or first.reward is None:
        return result("regrade", "n/a", "no graded oracle workspace to grade again")
    info = first.info["after_grade"]
    if "hook_error" in info:
        return result("regrade", "n/a", "re-grading failed", error=info["hook_error"][:500])
    again: list[float | None] = info.get("regrades", [])
    errors: list[str] = info.get("regrade_errors", [])
    trials = len(again) + 1
    differing = sum(r != first.reward for r in again)
    oracle_scored = _scored(ev.by_probe.get("oracle", []))
    oracle_flakes = len(set(oracle_scored)) > 1
    ci = proportion_ci(
        differing, max(len(again), 1), method="exact", confidence=1 - 2 * FLAKE_ALPHA
    )
    evidence = {
        "first": first.reward,
        "regrades": again,
        "errors": errors[:3],
        "flake_rate": differing / max(len(again), 1),
        "flake_rate_upper_95": round(ci.high, 4),
        "oracle_rewards": oracle_scored,
    }
    if differing or oracle_flakes:
        what = (
            f"{differing}/{len(again)} re-grades of one frozen workspace differ"
            if differing
            else "fresh oracle runs got different rewards"
        )
        return result("regrade", "fail", f"flaky grader: {what}", **evidence)
    return result(
        "regrade",
        "pass",
        f"{trials} grades of one frozen workspace agree (flake rate <= {ci.high:.0%} at 95%)",
        **evidence,
    )


def check_tamper(ev: TaskEvidence, probes: Sequence[str]) -> CheckResult:
    if ev.kind != "taskfolder":
        return result("tamper", "n/a", "no workspace or verifier to tamper with")
    base = noop_baseline(ev)
    winners = {}
    rewards = {}
    for name in probes:
        got = _scored(ev.by_probe.get(name, []))
        rewards[name] = got[0] if got else None
        if got and max(got) > base + 1e-9:
            winners[name] = max(got)
    if winners:
        names = ", ".join(sorted(winners))
        return result(
            "tamper",
            "fail",
            f"hack scored above doing nothing: {names}",
            baseline=base,
            winning_probes=winners,
            rewards=rewards,
        )
    return result(
        "tamper",
        "pass",
        f"{len(probes)} hacks scored no more than doing nothing",
        baseline=base,
        rewards=rewards,
    )


def check_leak(ev: TaskEvidence) -> CheckResult:
    if ev.leak_error:
        return result("answer_leak", "n/a", f"could not scan: {ev.leak_error}")
    if ev.leak_hits:
        where = sorted({h.where for h in ev.leak_hits})
        return result(
            "answer_leak",
            "fail",
            f"the answer is readable at reset: {', '.join(where[:4])}",
            hits=[h.to_dict() for h in ev.leak_hits[:20]],
            needles=ev.leak_needles,
        )
    if ev.leak_needles == 0:
        return result("answer_leak", "warn", "no answer to look for (no needle survived)")
    return result(
        "answer_leak", "pass", f"none of {ev.leak_needles} needles found", needles=ev.leak_needles
    )


def _net_lines(trajs: Sequence[Trajectory]) -> list[str]:
    lines = []
    for t in trajs:
        for m in t.messages:
            if m.get("role") == "tool":
                lines += [x for x in str(m.get("content", "")).splitlines() if "ENVLAB-NET-" in x]
    return lines


def check_network(ev: TaskEvidence) -> CheckResult:
    if ev.kind != "taskfolder":
        return result("network", "n/a", "no sandbox")
    lines = _net_lines(ev.by_probe.get("network", []))
    opened = [x.split()[1] for x in lines if x.startswith("ENVLAB-NET-OPEN")]
    verifier_net = sorted(set(NETWORK_WORDS.findall(ev.tests_text)))
    graded = [
        t for probes in ev.by_probe.values() for t in probes if t.status is not Status.INFRA_ERROR
    ]
    verifier_failed = not graded or any(
        t.status is Status.INFRA_ERROR and (t.error or "").startswith("grader")
        for probes in ev.by_probe.values()
        for t in probes
    )
    evidence = {"egress": lines, "verifier_network_words": verifier_net}
    if opened and not ev.network_declared:
        return result(
            "network", "fail", f"the agent's sandbox reached {', '.join(opened)}", **evidence
        )
    if verifier_net and verifier_failed:
        return result(
            "network",
            "fail",
            f"the verifier needs the network ({', '.join(verifier_net)}) and fails without it",
            verdict="broken",
            **evidence,
        )
    if verifier_net:
        return result(
            "network", "warn", f"the verifier mentions {', '.join(verifier_net)}", **evidence
        )
    if opened:
        return result("network", "warn", "network declared by the task and reachable", **evidence)
    if not lines:
        return result("network", "warn", "the network probe printed nothing", **evidence)
    return result("network", "pass", "no egress from the agent's sandbox", **evidence)


def check_verifier_health(ev: TaskEvidence) -> CheckResult:
    trajs = [t for probes in ev.by_probe.values() for t in probes]
    graded = [t for t in trajs if t.status.scored]
    grader_errors = [t for t in trajs if (t.error or "").startswith("grader")]
    if grader_errors:
        first = grader_errors[0].error or ""
        reason = first.splitlines()[0][:300]
        return result(
            "verifier_health",
            "fail",
            f"the grader failed in {len(grader_errors)}/{len(trajs)} episodes: {reason}",
            errors=[(t.error or "")[:500] for t in grader_errors[:3]],
        )
    if not graded:
        return result(
            "verifier_health",
            "fail",
            "no episode could be graded",
            statuses=[t.status.value for t in trajs],
        )
    return result("verifier_health", "pass", f"graded {len(graded)}/{len(trajs)} episodes")


def check_reset_hygiene(ev: TaskEvidence) -> CheckResult:
    states = [
        (p, t.info["after_reset"])
        for p, trajs in ev.by_probe.items()
        for t in trajs
        if "after_reset" in t.info and "hook_error" not in t.info["after_reset"]
    ]
    if len(states) < 2:
        return result("reset_hygiene", "n/a", "fewer than two resets observed")
    first = states[0][1]
    differ = sorted({k for _, s in states for k in set(s) | set(first) if s.get(k) != first.get(k)})
    if differ:
        return result(
            "reset_hygiene",
            "fail",
            f"the state after reset differs across episodes in {', '.join(differ[:5])}",
            differing_keys=differ,
            examples=[s for _, s in states[:3]],
        )
    return result("reset_hygiene", "pass", f"{len(states)} resets gave the same state", state=first)


def check_trivial_options(ev: TaskEvidence, probes: Sequence[str]) -> CheckResult:
    """Task folders: a multiple-choice grader must accept one option only; echoing the prompt
    must not pass."""
    rewards = {p: (_scored(ev.by_probe.get(p, [])) or [None])[0] for p in probes}
    options = [p for p in probes if p.startswith("constant_")]
    passing = [p for p in options if (rewards[p] or 0) >= PASS_THRESHOLD - 1e-9]
    echo = rewards.get("echo_prompt")
    if len(passing) >= 2:
        return result(
            "trivial_strategies",
            "fail",
            f"{len(passing)} of {len(options)} constant answers pass: guessing beats chance",
            rewards=rewards,
        )
    if echo is not None and echo > 0:
        return result("trivial_strategies", "fail", "echoing the prompt scores", rewards=rewards)
    if not probes:
        return result("trivial_strategies", "n/a", "no answer file to fill")
    return result("trivial_strategies", "pass", "no trivial strategy scores", rewards=rewards)
