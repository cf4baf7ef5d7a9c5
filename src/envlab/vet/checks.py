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
from envlab.measure import is_pass
from envlab.vet.informed import OracleView
from envlab.vet.leak import Hit
from envlab.vet.model import CHECKS, CheckResult, CheckStatus, Verdict
from envlab.vet.probes import Probe

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
    shared_verifier: bool = False
    """Harbor's shared verifier mode: the agent's processes are alive while it is graded."""
    probes: dict[str, Probe] = field(default_factory=dict)
    """The shell probes run on the task, by name (both phases)."""
    leak_hits: list[Hit] = field(default_factory=list)
    """Needles found outside the material the instruction names: leak candidates."""
    leak_warnings: list[Hit] = field(default_factory=list)
    """Needles found inside the material the instruction names (an archive to extract)."""
    leak_needles: int = 0
    leak_error: str | None = None
    view: OracleView | None = None
    write_tools: list[str] = field(default_factory=list)
    """The tools offered that change state (``@tool(writes=True)``), of a Python environment."""

    def probe_names(self, check: str) -> list[str]:
        return [n for n, p in self.probes.items() if p.check == check]

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


def probe_outcome(t: Trajectory) -> dict[str, Any]:
    """One probe episode as evidence: its reward, whether it passed (``PASS_THRESHOLD``), and
    the reward components it satisfied (scored ``PASS_THRESHOLD`` or more)."""
    return {
        "reward": t.reward,
        "status": t.status.value,
        "passed": t.scored and is_pass(t.reward, PASS_THRESHOLD),
        "components": dict(t.components),
        "satisfied": sorted(k for k, v in t.components.items() if v >= PASS_THRESHOLD),
        "gated_by": t.gated_by,
    }


def passes(ev: TaskEvidence, probes: Sequence[str]) -> list[str]:
    return [p for p in probes if any(probe_outcome(t)["passed"] for t in ev.by_probe.get(p, []))]


def satisfied_text(ev: TaskEvidence, probe: str) -> str:
    outcomes = [probe_outcome(t) for t in ev.by_probe.get(probe, [])]
    best = max(outcomes, key=lambda o: o["reward"] or 0.0, default=None)
    if best is None or not best["satisfied"]:
        return ""
    return f"; satisfied: {', '.join(best['satisfied'])}"


def check_noop(ev: TaskEvidence) -> CheckResult:
    probes = ["noop", "empty_answer"] if ev.kind == "taskfolder" else ["noop"]
    got = {p: ev.rewards(p) for p in probes if p in ev.by_probe}
    scored = {p: [r for r in v if r is not None] for p, v in got.items()}
    if not any(scored.values()):
        return result("noop", "n/a", "no scored no-op episode (see verifier_health)", rewards=got)
    evidence: dict[str, Any] = {
        "rewards": got,
        "passed": passes(ev, probes),
        "episodes": {p: [probe_outcome(t) for t in ev.by_probe[p]] for p in got},
    }
    bad = {p: v for p, v in scored.items() if any(r > 0 for r in v)}
    if bad:
        names = ", ".join(bad)
        why = "passes" if evidence["passed"] else "scores above 0"
        more = satisfied_text(ev, next(iter(bad)))
        return result("noop", "fail", f"doing nothing {why} ({names}){more}", **evidence)
    return result("noop", "pass", "doing nothing scores 0", **evidence)


def check_oracle(ev: TaskEvidence) -> CheckResult:
    trajs = ev.by_probe.get("oracle", [])
    if not trajs:
        return result("oracle", "n/a", "no reference solution to run")
    rewards = [t.reward for t in trajs]
    statuses = [t.status.value for t in trajs]
    scored = _scored(trajs)
    passed = sum(is_pass(r, PASS_THRESHOLD) for r in scored)
    if not scored:
        return result(
            "oracle", "fail", "no oracle run could be graded", rewards=rewards, statuses=statuses
        )
    declared = ev.task.metadata.get("reference_reward")
    if isinstance(declared, (int, float)) and passed < len(trajs):
        return _declared_reference(float(declared), trajs, rewards, statuses)
    if passed < len(trajs):
        return result(
            "oracle",
            "fail",
            f"the reference solution passed {passed}/{len(trajs)} fresh runs",
            rewards=rewards,
            statuses=statuses,
            errors=[t.error.describe() for t in trajs if t.error][:3],
        )
    return result("oracle", "pass", f"passed {passed}/{len(trajs)} fresh runs", rewards=rewards)


def _declared_reference(
    declared: float, trajs: list[Trajectory], rewards: list[float | None], statuses: list[str]
) -> CheckResult:
    """A task whose best play cannot pass by design (``metadata["reference_reward"]``: an
    expected-cost task whose drawn outcome the best action misses): the reference must score
    exactly that, every run; a ``warn``, never a pass, so that a low declaration is seen."""
    same = sum(t.reward is not None and abs(t.reward - declared) < 1e-9 for t in trajs)
    if same < len(trajs):
        return result(
            "oracle",
            "fail",
            f"the reference solution scored its declared {declared:g} in {same}/{len(trajs)} "
            "fresh runs",
            rewards=rewards,
            statuses=statuses,
        )
    return result(
        "oracle",
        "warn",
        f"the reference solution scored its declared {declared:g} in {same}/{len(trajs)} runs: "
        "below a pass by design (the best play misses this task's drawn outcome)",
        rewards=rewards,
    )


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
    honest = honest_trajectories(ev)
    verifier_failed = not any(t.scored for t in honest) or any(_grader_error(t) for t in honest)
    evidence = {"egress": lines, "verifier_network_words": verifier_net}
    needs = sorted({m for t in honest if t.grader_failed
                    for m in _NEEDS_NETWORK.findall(t.grader_failed)})  # fmt: skip
    if needs:
        return result(
            "network", "fail", f"grading needs the network ({'; '.join(needs)[:300]}) and "
            "envlab grades offline: the task needs the internet", verdict="broken",
            needs_network=needs, **evidence,
        )  # fmt: skip
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


_NEEDS_NETWORK = re.compile(r"needs the network \((.+?)\): grading is offline")


def honest_trajectories(ev: TaskEvidence) -> list[Trajectory]:
    """Episodes of agents that do not attack the grader (baselines, the oracle, trivial
    strategies, the real agent): a grader failure there is the grader's, not a defence."""
    attacks = set(ev.probe_names("tamper")) | set(ev.probe_names("leak"))
    return [t for p, trajs in ev.by_probe.items() if p not in attacks for t in trajs]


def _grader_error(t: Trajectory) -> str | None:
    """Why grading failed: an invalid grade (``grader_failed``) or grading machinery that
    failed (an ``infra_error`` while grading)."""
    if t.grader_failed:
        return t.grader_failed
    e = t.error
    if t.status is Status.INFRA_ERROR and e is not None and e.phase == "grade":
        return e.message
    return None


def source_defect(t: Trajectory) -> str:
    """What an adapter found wrong with its source's own grading of this episode (the grade
    it gave is safe: the agent's answer scored as its failure), or ``""``."""
    grade = t.info.get("grade")
    return str(grade.get("source_defect") or "") if isinstance(grade, dict) else ""


def check_verifier_health(ev: TaskEvidence) -> CheckResult:
    trajs = honest_trajectories(ev)
    graded = [t for t in trajs if t.status.scored]
    grader_errors = [t for t in trajs if _grader_error(t)]
    if grader_errors:
        first = _grader_error(grader_errors[0]) or ""
        reason = first.splitlines()[0][:300]
        return result(
            "verifier_health",
            "fail",
            f"the grader failed in {len(grader_errors)}/{len(trajs)} episodes: {reason}",
            errors=[(_grader_error(t) or "")[:500] for t in grader_errors[:3]],
        )
    if not graded:
        return result(
            "verifier_health",
            "fail",
            "no episode could be graded",
            statuses=[t.status.value for t in trajs],
        )
    defects = [(p, d) for p, ts in ev.by_probe.items() for t in ts if (d := source_defect(t))]
    if defects:
        return result(
            "verifier_health",
            "fail",
            f"the source's grader is defective (in {len(defects)} episodes, each scored as the "
            f"agent's failure; {defects[0][0]}): {defects[0][1][:300]}",
            defects=[f"{p}: {d[:300]}" for p, d in defects[:3]],
        )
    if ev.shared_verifier:
        return result(
            "verifier_health", "warn",
            f"graded {len(graded)}/{len(trajs)} honest episodes, in Harbor's shared mode: the "
            "tests run in the agent's filesystem with its processes alive. Tamper evidence "
            "makes a grade that read or ran a file the agent changed outside what the oracle "
            "changes grader_tainted (0), but a process of the agent could still race the "
            "reward file while test.sh runs; declare separate unless the tests need the "
            "agent's system state",
        )  # fmt: skip
    return result("verifier_health", "pass", f"graded {len(graded)}/{len(trajs)} honest episodes")


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


def check_trivial_options(ev: TaskEvidence) -> CheckResult:
    """Task folders: a multiple-choice grader must accept one option only; echoing the prompt
    must score no more than doing nothing."""
    probes = ev.probe_names("trivial")
    rewards = {p: (_scored(ev.by_probe.get(p, [])) or [None])[0] for p in probes}
    options = [p for p in probes if p.startswith("constant_")]
    passing = [p for p in options if is_pass(rewards[p], PASS_THRESHOLD)]
    echo = rewards.get("echo_prompt")
    if len(passing) >= 2:
        return result(
            "trivial_strategies",
            "fail",
            f"{len(passing)} of {len(options)} constant answers pass: guessing beats chance",
            rewards=rewards,
        )
    base = noop_baseline(ev)
    if echo is not None and echo > base + 1e-9:
        return result(
            "trivial_strategies",
            "fail",
            f"echoing the prompt scores {echo:g} (doing nothing: {base:g})",
            rewards=rewards,
        )
    if not probes:
        return result("trivial_strategies", "n/a", "no answer file to fill")
    return result("trivial_strategies", "pass", "no trivial strategy scores", rewards=rewards)
