"""The answer where an agent can read it, beyond the prompt: the leak scan of Python environments.

Surfaces are what the probe episodes recorded as the agent's input (never the environment's
code): the system prompt, the first observation (when the environment shows more than the
task's prompt), every tool schema (descriptions, defaults, enums) and every tool result and
later message of every probe episode that is not privileged. The needle is the task's hidden
answer when it is a plain value (a number or a short text), in its normalised forms.

A hit counts as a leak when an agent could tell it is the answer:

- ``default``: a parameter's default is the answer; ``enum``: an enum of one value is;
- ``labelled``: the answer follows a word that labels it (``expected``, ``answer``, ``solution``,
  ``correct``, ``hint``, ...) within ``LABEL_WINDOW`` characters, on any surface;
- ``systematic``: in the system prompt, the first observation or the tool schemas, the answers
  of the tasks appear in their own surface far more often than the other tasks' answers do
  (the prompt check's Fisher test). A list of every option shows every task's answer alike
  and is not a leak.

Tool results and later messages are the task's inputs (a lookup returns what the task asks
for): there only labelled hits count. Each task with a leak gets a copy probe, which makes the
calls that showed the leak and answers with the leaked value; the leak quarantines the task
when the copy passes (else it is a warning).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentFactory,
    AgentSpec,
    EpisodeContext,
    Observation,
    Task,
    ToolCall,
    Trajectory,
)
from envlab.envs.answers import answer_text
from envlab.vet.checks import TaskEvidence, probe_outcome, result
from envlab.vet.leak import _token_re, is_trivial, normalize
from envlab.vet.model import CheckResult, EnvCheck

LABEL = re.compile(
    r"answer|expect|solution|correct|gold|truth|secret|hint|grader|reference|target", re.I
)
LABEL_WINDOW = 40
"""How far before a hit (characters) a labelling word counts."""
MAX_ANSWER = 200
COPY_PROBE = "leak_copy"
SCANNED_KINDS = ("system_prompt", "observation", "tool_schema")
"""The surfaces where an unlabelled hit counts when it is systematic across tasks."""


@dataclass(frozen=True, slots=True)
class Surface:
    kind: str
    """``system_prompt``, ``observation``, ``tool_schema``, ``tool_result``, ``message``."""
    where: str
    text: str
    calls: tuple[tuple[str, str], ...] = ()
    """The tool calls that led to it (name, arguments), to make again."""


@dataclass(frozen=True, slots=True)
class SurfaceHit:
    kind: str
    where: str
    how: str
    """``default``, ``enum``, ``labelled`` or ``text`` (counts only when systematic)."""
    found: str
    context: str
    calls: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"surface": self.kind, "where": self.where, "how": self.how,
                "found": self.found, "context": self.context}  # fmt: skip


@dataclass(slots=True)
class LeakFindings:
    hits: dict[str, list[SurfaceHit]] = field(default_factory=dict)
    """The hits that count, by task."""
    systematic: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per surface kind: the own-answer and other-answer rates and the test."""


def answer_needle(task: Task) -> str | None:
    """The task's answer as text to look for, or ``None`` when it is not a plain value."""
    a = task.answer
    if isinstance(a, bool) or not isinstance(a, str | int | float):
        return None
    text = normalize(answer_text(a))
    return text if 0 < len(text) <= MAX_ANSWER else None


def _distinctive(needle: str) -> bool:
    return not is_trivial(needle) and len(needle) >= 3


def surfaces(task: Task, trajectories: list[Trajectory]) -> list[Surface]:
    """What the agent could read in ``trajectories`` (privileged ones left out)."""
    out: list[Surface] = []
    plain = [t for t in trajectories if not t.agent.privileged]
    if not plain:
        return out
    first = plain[0]
    sys_msgs = [m for m in first.messages if m.get("role") == "system"]
    if sys_msgs:
        out.append(Surface("system_prompt", "system prompt", str(sys_msgs[0].get("content", ""))))
    users = [m for m in first.messages if m.get("role") == "user"]
    if users and normalize(str(users[0].get("content", ""))) != normalize(task.prompt):
        out.append(Surface("observation", "first observation", str(users[0].get("content"))))
    for spec in first.tools:
        out += list(_schema_surfaces(spec))
    for t in plain:
        out += list(_episode_surfaces(t))
    return out


def _schema_surfaces(spec: dict[str, Any]) -> Iterator[Surface]:
    fn = spec.get("function", spec)
    name = fn.get("name", "?")
    yield Surface("tool_schema", f"tool {name}: description", str(fn.get("description", "")))
    for pname, p in (fn.get("parameters", {}).get("properties", {}) or {}).items():
        where = f"tool {name}: parameter {pname}"
        yield Surface("tool_schema", where, json.dumps(p, ensure_ascii=False, default=str))


def _episode_surfaces(t: Trajectory) -> Iterator[Surface]:
    calls: list[tuple[str, str]] = []
    ids: dict[str, int] = {}
    probe = t.info.get("probe", "?")
    seen_user = False
    for m in t.messages:
        role = m.get("role")
        for c in m.get("tool_calls") or []:
            f = c.get("function", {})
            ids[c.get("id", "")] = len(calls)
            calls.append((str(f.get("name")), str(f.get("arguments", "{}"))))
        if role == "tool":
            upto = ids.get(str(m.get("tool_call_id")), len(calls) - 1) + 1
            where = f"result of {m.get('name')} in probe {probe}"
            yield Surface("tool_result", where, str(m.get("content", "")), tuple(calls[:upto]))
        elif role == "user":
            if seen_user:
                where = f"message in probe {probe}"
                yield Surface("message", where, str(m.get("content", "")), tuple(calls))
            seen_user = True


def _schema_hit(needle: str, s: Surface) -> SurfaceHit | None:
    """A default or a one-value enum that is the answer."""
    if not s.where.startswith("tool ") or ": parameter " not in s.where:
        return None
    try:
        schema = json.loads(s.text)
    except ValueError:
        return None
    nodes = [schema, *[b for b in schema.get("anyOf", []) if isinstance(b, dict)]]
    for node in nodes:
        default = node.get("default")
        if default is not None and normalize(answer_text(default)) == needle:
            return SurfaceHit(s.kind, s.where, "default", str(default), s.text[:200])
        enum = node.get("enum") or []
        if len(enum) == 1 and normalize(answer_text(enum[0])) == needle:
            return SurfaceHit(s.kind, s.where, "enum", str(enum[0]), s.text[:200])
    return None


def find_hits(needle: str, s: Surface) -> list[SurfaceHit]:
    """Where ``needle`` is on ``s``: structured hits first, then labelled or plain text ones."""
    structured = _schema_hit(needle, s)
    if structured is not None:
        return [structured]
    hay = normalize(s.text)
    out: list[SurfaceHit] = []
    for m in _token_re(needle).finditer(hay):
        before = hay[max(0, m.start() - LABEL_WINDOW) : m.start()]
        how = "labelled" if LABEL.search(before) else "text"
        ctx = hay[max(0, m.start() - 60) : m.end() + 60]
        out.append(SurfaceHit(s.kind, s.where, how, m.group(0), ctx, s.calls))
        if how == "labelled":
            break
    return out


def scan_surfaces(tasks: list[Task], evidence: dict[str, TaskEvidence]) -> LeakFindings:
    """Every task's surfaces against its answer; the hits that count (module docstring)."""
    from scipy import stats

    f = LeakFindings()
    needles = {t.id: answer_needle(t) for t in tasks}
    texts: dict[str, dict[str, str]] = {}
    weak: dict[str, list[SurfaceHit]] = {}
    for t in tasks:
        needle = needles[t.id]
        trajs = [x for p, v in evidence[t.id].by_probe.items() if p != COPY_PROBE for x in v]
        found = surfaces(t, trajs)
        texts[t.id] = {k: "\n".join(s.text for s in found if s.kind == k) for k in SCANNED_KINDS}
        if needle is None:
            continue
        strong: list[SurfaceHit] = []
        for s in found:
            for h in find_hits(needle, s):
                if h.how != "text":
                    strong.append(h)
                elif s.kind in SCANNED_KINDS and _distinctive(needle):
                    weak.setdefault(t.id, []).append(h)
        if strong:
            f.hits[t.id] = strong
    for kind in SCANNED_KINDS:
        own, other, m = [], [], 0
        for i, t in enumerate(tasks):
            needle = needles[t.id]
            if needle is None or not _distinctive(needle):
                continue
            m += 1
            own.append(t.id if any(h.kind == kind for h in weak.get(t.id, [])) else None)
            alt = _other_answer(tasks, needles, i)
            other.append(
                alt is not None and bool(_token_re(alt).search(normalize(texts[t.id][kind])))
            )
        k, k0 = sum(x is not None for x in own), sum(other)
        p = (
            float(stats.fisher_exact([[k, m - k], [k0, m - k0]], alternative="greater")[1])
            if m
            else 1.0
        )
        systematic = m > 0 and k / m >= 0.5 and (p < 0.01 or m < 10) and k > k0
        f.systematic[kind] = {"own_answer": k, "other_answers": k0, "tasks": m,
                              "p_value": p, "systematic": systematic}  # fmt: skip
        if systematic:
            for tid in (x for x in own if x is not None):
                f.hits.setdefault(tid, []).extend(h for h in weak[tid] if h.kind == kind)
    return f


def _other_answer(tasks: list[Task], needles: dict[str, str | None], i: int) -> str | None:
    """The next task's answer that differs from task ``i``'s (the chance baseline)."""
    own = needles[tasks[i].id]
    for k in range(1, len(tasks)):
        alt = needles[tasks[(i + k) % len(tasks)].id]
        if alt is not None and alt != own and _distinctive(alt):
            return alt
    return None


class CopyAgent(Agent):
    """Makes the calls that showed a leak, then answers with the leaked value."""

    name = "leak_copy"

    def __init__(self, calls: tuple[tuple[str, str], ...], answer: str) -> None:
        self._queue = [ToolCall(n, a, id=f"vet_copy_{i}") for i, (n, a) in enumerate(calls)]
        self.answer, self._done = answer, False

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="leak_copy", harness="vet:leak_copy")

    async def start(self, ctx: EpisodeContext) -> None:
        return None

    async def act(self, observation: Observation) -> Action:
        if self._queue:
            return Action(tool_calls=[self._queue.pop(0)])
        reply, self._done = ("" if self._done else self.answer), True
        return Action(text=reply)


def copy_agent(hits: list[SurfaceHit]) -> AgentFactory:
    """The copy of the first hit (the one with fewest calls to make again)."""
    best = min(hits, key=lambda h: len(h.calls))
    return AgentClass(CopyAgent, best.calls, best.found)


def check_reachable_leak(ev: TaskEvidence, hits: list[SurfaceHit]) -> CheckResult | None:
    """The leak verdict of a task from its surface hits and its copy probe (``None``: no hit)."""
    if not hits:
        return None
    copies = [probe_outcome(t) for t in ev.by_probe.get(COPY_PROBE, [])]
    passed = any(o["passed"] for o in copies)
    first = hits[0]
    what = f"the answer is in the {first.where} ({first.how}: ...{first.context[:120]}...)"
    evidence = {"hits": [h.to_dict() for h in hits[:10]], "copy": copies}
    if passed:
        return result(
            "answer_leak", "fail",
            f"{what}, and answering it passes: remove the answer from what the agent can read "
            "(system prompt, tool schemas and results), or keep it in the task's hidden answer",
            **evidence,
        )  # fmt: skip
    return result("answer_leak", "warn", f"{what}; answering it did not pass", **evidence)


def leak_env_check(findings: LeakFindings, n_tasks: int) -> EnvCheck:
    by_surface: dict[str, int] = {}
    for hits in findings.hits.values():
        for kind in {h.kind for h in hits}:
            by_surface[kind] = by_surface.get(kind, 0) + 1
    counts = ", ".join(f"{k} {v}" for k, v in sorted(by_surface.items())) or "none"
    return EnvCheck(
        name="answer_reachable",
        status="fail" if findings.hits else "pass",
        summary=f"tasks whose answer an agent can read beyond the prompt: {counts} "
        f"(of {n_tasks} tasks)",
        evidence={"by_surface": by_surface, "systematic": findings.systematic},
    )
