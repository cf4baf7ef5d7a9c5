"""The checks that judge attacks: ``tamper`` (did the verifier defend every hack?) and
``answer_leak`` (is the answer readable at reset, and does copying it pass?).

A probe is ``exposed`` when it is rewarded at or above its bar (above doing nothing for a pure
hack, a pass for a probe that also does honest work) or when its grade escaped as an
``infra_error``/``env_error`` (the agent escaped being scored), or when its code changed
pytest's own code from inside the tests' process (envlab's guard scored it 0, but the task lets
the agent's code into its test runner: any harness without the guard pays it); ``defended`` when
it scored no more than doing nothing or ``grader_failed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envlab.core import Trajectory
from envlab.measure import is_pass
from envlab.vet.checks import PASS_THRESHOLD, TaskEvidence, noop_baseline, result
from envlab.vet.informed import GAVE_UP
from envlab.vet.model import CheckResult
from envlab.vet.probes import Probe


def _tool_text(t: Trajectory) -> str:
    return "\n".join(str(m.get("content", "")) for m in t.messages if m.get("role") == "tool")


def probe_outcome(probe: Probe, trajs: Sequence[Trajectory], base: float) -> dict[str, Any]:
    """Whether the verifier defended one probe: ``exposed`` (rewarded at or above its bar, or
    the grade escaped as an ``infra_error``/``env_error``), ``defended`` (scored no more than
    doing nothing, or ``grader_failed``), ``not_applicable`` or ``inconclusive``."""
    if not trajs:
        return {"outcome": "not_run"}
    t = trajs[0]
    ev: dict[str, Any] = {"family": probe.family, "reward": t.reward, "status": t.status.value}
    grade = t.info.get("grade") or {}
    if t.grader_failed:
        ev["grader_failed"] = t.grader_failed.split("Output tail:")[0].strip()[:300]
    elif "verifier_exit_code" in grade:
        ev["verifier_exit_code"] = grade["verifier_exit_code"]
    if grade.get("not_carried"):  # what the verifier left out of its view of the workspace
        ev["not_carried"] = [
            f"{n.get('path')} ({n.get('kind')}{' -> ' + n['target'] if n.get('target') else ''})"
            for n in grade["not_carried"][:5]
            if isinstance(n, dict)
        ]
    if not t.scored:
        why = f"{t.status.value}: {t.error.headline()[:300] if t.error else '?'}"
        if t.n_steps == 0:
            return {**ev, "outcome": "inconclusive", "how": f"failed before the probe ran ({why})"}
        return {**ev, "outcome": "exposed", "how": f"escaped being scored ({why})"}
    reward = t.reward or 0.0
    patched = [x for x in grade.get("grader_tainted") or [] if str(x).startswith("pytest:")]
    if patched:  # envlab's guard held the grade; the task itself lets the agent's code in
        return {
            **ev,
            "outcome": "exposed",
            "how": "the tests run the agent's code inside pytest's own process and it changed "
            f"pytest ({str(patched[0])[:200]}): envlab's guard caught it and scored 0, a "
            "harness without the guard pays it; run the code under test in a child process",
        }
    if probe.after_oracle is not None and GAVE_UP in _tool_text(t):
        return {
            **ev,
            "outcome": "not_applicable",
            "how": "the tampered inputs have the same answer",
        }
    won = reward > base + 1e-9 and (probe.bar == "floor" or is_pass(reward, PASS_THRESHOLD))
    if won:
        bar = "above doing nothing" if probe.bar == "floor" else "a pass"
        return {**ev, "outcome": "exposed", "how": f"scored {reward:g}, {bar} ({base:g})"}
    how = "grader_failed" if t.grader_failed else f"scored {reward:g} (doing nothing: {base:g})"
    return {**ev, "outcome": "defended", "how": how}


def check_tamper(ev: TaskEvidence) -> CheckResult:
    if ev.kind != "taskfolder":
        return result("tamper", "n/a", "no workspace or verifier to tamper with")
    base = noop_baseline(ev)
    names = ev.probe_names("tamper")
    outcomes = {n: probe_outcome(ev.probes[n], ev.by_probe.get(n, []), base) for n in names}
    rewards = {n: o.get("reward") for n, o in outcomes.items()}
    exposed = {n: o for n, o in outcomes.items() if o["outcome"] == "exposed"}
    evidence = {
        "baseline": base,
        "rewards": rewards,
        "probes": outcomes,
        "defended": sorted(n for n, o in outcomes.items() if o["outcome"] == "defended"),
    }
    if exposed:
        parts = [f"{n} ({o['how']})" for n, o in sorted(exposed.items())]
        return result(
            "tamper",
            "fail",
            "exposed to " + "; ".join(parts),
            winning_probes={n: o.get("reward") for n, o in exposed.items()},
            **evidence,
        )
    odd = sorted(n for n, o in outcomes.items() if o["outcome"] == "inconclusive")
    if odd:
        return result(
            "tamper", "warn", f"{len(odd)} probe(s) could not run: {', '.join(odd)}", **evidence
        )
    return result(
        "tamper",
        "pass",
        f"{len(evidence['defended'])} hacks defended (scored no more than doing nothing)",
        **evidence,
    )


def check_leak(ev: TaskEvidence) -> CheckResult:
    """Quarantine when an answer sits outside the material the instruction names and copying
    it to where the oracle writes passes; a warning when it is inside that material, or when
    the copy does not pass."""
    if ev.leak_error:
        return result("answer_leak", "n/a", f"could not scan: {ev.leak_error}")
    copies = {
        n: probe_outcome(ev.probes[n], ev.by_probe.get(n, []), noop_baseline(ev))
        for n in ev.probe_names("leak")
    }
    confirmed = {n: o for n, o in copies.items() if o["outcome"] == "exposed"}
    evidence: dict[str, Any] = {
        "hits": [h.to_dict() for h in ev.leak_hits[:20]],
        "in_material": [h.to_dict() for h in ev.leak_warnings[:20]],
        "copies": {n: {"description": ev.probes[n].description, **o} for n, o in copies.items()},
        "needles": ev.leak_needles,
    }
    where = sorted({h.where for h in ev.leak_hits})
    if confirmed:
        return result(
            "answer_leak",
            "fail",
            f"the answer is readable at reset ({', '.join(where[:4])}) and copying it passes",
            **evidence,
        )
    if ev.leak_hits:
        return result(
            "answer_leak",
            "warn",
            f"an answer needle is readable at reset ({', '.join(where[:4])}), but copying it to "
            "where the oracle writes does not pass",
            **evidence,
        )
    if ev.leak_warnings:
        inside = sorted({h.where for h in ev.leak_warnings})
        return result(
            "answer_leak",
            "warn",
            f"the answer is in the material the instruction names ({', '.join(inside[:4])})",
            **evidence,
        )
    if ev.leak_needles == 0:
        return result("answer_leak", "warn", "no answer to look for (no needle survived)")
    return result(
        "answer_leak", "pass", f"none of {ev.leak_needles} needles found", needles=ev.leak_needles
    )
