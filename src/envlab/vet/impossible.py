"""Tasks that cannot be solved: identical tasks with different answers.

Two tasks are identical to an agent when everything it can observe at the start is the same:
the prompt, the system prompt, the first observation, the tool schemas and the state after
reset (``state()``, with the task's own id left out), and when every tool call that the probes
made in both with the same arguments got the same result. An agent cannot tell them apart, so
no answer passes both when their answers differ: each such task is ``broken``.

Repeated prompts over different tool state are legitimate: the state after reset, or the same
call answered differently, tells them apart. When the answers are plain values, each task is
tried with the other's answer: a grader that accepts both (``4`` and ``4.0``) is no defect.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from envlab.core import AgentClass, AgentFactory, Task, Trajectory
from envlab.envs.answers import answer_text
from envlab.vet.checks import TaskEvidence, probe_outcome, result
from envlab.vet.model import CheckResult, EnvCheck
from envlab.vet.surfaces import CopyAgent

CROSS_PROBE = "other_answer"
"""The probe that answers a task with the answer of a task identical to it."""


def _strip(value: Any, task_id: str) -> Any:
    """``value`` without the task's own id (an episode's state names its task)."""
    if isinstance(value, dict):
        return {k: _strip(v, task_id) for k, v in value.items() if v != task_id}
    if isinstance(value, list):
        return [_strip(v, task_id) for v in value if v != task_id]
    return value


def fingerprint(task: Task, trajs: list[Trajectory]) -> str | None:
    """A hash of what an agent observes when the task starts (``None``: nothing recorded)."""
    plain = [t for t in trajs if not t.agent.privileged]
    if not plain:
        return None
    first = plain[0]
    state = first.info.get("after_reset", {})
    opening = [m for m in first.messages[:3] if m.get("role") in ("system", "user")]
    seen = {
        "prompt": task.prompt,
        "opening": opening,
        "tools": first.tools,
        "state": _strip(state, task.id),
    }
    blob = json.dumps(seen, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def call_results(trajs: list[Trajectory], privileged: bool = False) -> dict[str, str]:
    """``tool(arguments) -> result`` of every call the probes made (the privileged ones' only
    with ``privileged``)."""
    out: dict[str, str] = {}
    for t in trajs:
        if t.agent.privileged and not privileged:
            continue
        calls: dict[str, str] = {}
        for m in t.messages:
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                calls[str(c.get("id"))] = f"{f.get('name')}({f.get('arguments')})"
            if m.get("role") == "tool" and str(m.get("tool_call_id")) in calls:
                out.setdefault(calls[str(m.get("tool_call_id"))], str(m.get("content")))
    return out


def _answer_key(task: Task) -> str:
    a = task.answer
    if isinstance(a, int | float | str) and not isinstance(a, bool):
        return answer_text(a).strip().lower()
    return json.dumps(a, sort_keys=True, default=str)


def _tell_apart(a: dict[str, str], b: dict[str, str]) -> str | None:
    """A call both made that got different results (the state differs), if any."""
    return next((k for k in sorted(set(a) & set(b)) if a[k] != b[k]), None)


def identical_pairs(tasks: list[Task], evidence: dict[str, TaskEvidence]) -> dict[str, list[str]]:
    """For each task, the tasks identical to it with a different answer."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        fp = fingerprint(t, [x for v in evidence[t.id].by_probe.values() for x in v])
        if fp is not None and t.answer is not None:
            groups.setdefault(fp, []).append(t)
    results = {t.id: call_results([x for v in evidence[t.id].by_probe.values() for x in v])
               for g in groups.values() if len(g) > 1 for t in g}  # fmt: skip
    out: dict[str, list[str]] = {}
    for group in groups.values():
        for a in group:
            for b in group:
                if a.id == b.id or _answer_key(a) == _answer_key(b):
                    continue
                if _tell_apart(results[a.id], results[b.id]) is None:
                    out.setdefault(a.id, []).append(b.id)
    return out


def oracle_calls(trajs: list[Trajectory]) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """The tool calls of the first oracle episode (name, arguments) and their results."""
    for t in trajs:
        if t.info.get("probe") != "oracle":
            continue
        calls = tuple(
            (str(c.get("function", {}).get("name")), str(c.get("function", {}).get("arguments")))
            for m in t.messages
            for c in m.get("tool_calls") or []
        )
        return calls, call_results([t], privileged=True)
    return (), {}


def cross_agents(
    tasks: list[Task], evidence: dict[str, TaskEvidence], pairs: dict[str, list[str]]
) -> dict[str, AgentFactory]:
    """For each task with a twin: an agent that makes the twin's reference calls and answers
    the twin's answer (a different result tells the two apart; a pass, that both answers are
    accepted)."""
    by_id = {t.id: t for t in tasks}
    out: dict[str, AgentFactory] = {}
    for tid, twins in pairs.items():
        twin = by_id[twins[0]]
        calls, _ = oracle_calls([x for v in evidence[twin.id].by_probe.values() for x in v])
        answer = answer_text(twin.answer) if _plain(twin.answer) else ""
        out[tid] = AgentClass(CopyAgent, calls, answer)
    return out


def _plain(a: Any) -> bool:
    return isinstance(a, int | float | str) and not isinstance(a, bool)


def _told_apart(ev: TaskEvidence, twin: TaskEvidence) -> str | None:
    """A call of the twin's reference solution answered otherwise here, if any."""
    _, expected = oracle_calls([x for v in twin.by_probe.values() for x in v])
    got = call_results(ev.by_probe.get(CROSS_PROBE, []), privileged=True)
    return _tell_apart(got, expected)


def check_impossible(
    tasks: list[Task], evidence: dict[str, TaskEvidence], pairs: dict[str, list[str]]
) -> tuple[EnvCheck, dict[str, CheckResult]]:
    by_id = {t.id: t for t in tasks}
    per: dict[str, CheckResult] = {}
    broken: list[str] = []
    for t in tasks:
        twins = pairs.get(t.id, [])
        cross = [probe_outcome(x) for x in evidence[t.id].by_probe.get(CROSS_PROBE, [])]
        apart = _told_apart(evidence[t.id], evidence[twins[0]]) if twins else None
        if not twins or apart is not None or any(o["passed"] for o in cross):
            why = (
                "no identical task answers otherwise"
                if not twins
                else f"the twin's call {apart} is answered otherwise here"
                if apart
                else "the twin's answer passes here too"
            )
            per[t.id] = result("impossible_task", "pass", why, twins=twins)
            continue
        broken.append(t.id)
        per[t.id] = result(
            "impossible_task",
            "fail",
            f"identical to {', '.join(twins[:3])} (same prompt, system prompt, tools and state "
            f"after reset; the same tool calls answered alike) but the answer differs "
            f"({answer_text(t.answer)[:60]!r} vs {answer_text(by_id[twins[0]].answer)[:60]!r}): "
            "no agent can pass both; give identical tasks one answer, or make the difference "
            "observable (in the prompt or the tools' state)",
            twins=twins,
            other_answer=cross,
        )
    env = EnvCheck(
        name="impossible_tasks",
        status="fail" if broken else "pass",
        summary=f"{len(broken)}/{len(tasks)} tasks are identical to another with a different "
        "answer",
        evidence={"tasks": broken[:50]},
    )
    return env, per
