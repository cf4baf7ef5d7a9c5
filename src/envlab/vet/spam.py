"""The spam probe: an agent that reads everything it can reach and repeats it all to the user.

It knows nothing of the domain. From the observations and tool results so far it collects
id-like tokens (``#W2378156``, ``mia_li_3668``, ``HAT136``, ``4WQ150``, long numbers, emails),
calls every read tool (``ToolSpec.writes`` false) it can fill on every one of them, one call per
step, and sends the user a message with every tool result it got. It goes on in rounds (new
calls on the ids found since, then the whole dump again) until the episode ends, or its rounds
or its step budget (one step under the environment's ``max_steps``) run out; then it sends empty
messages, as the no-op agent does. A grader it passes rewards reading data and dumping it, not
doing the task: ``check_spam`` makes such a task ``trivial``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentFactory,
    AgentSpec,
    EpisodeContext,
    Limits,
    Observation,
    Task,
    ToolCall,
    ToolSpec,
)
from envlab.vet.checks import (
    TaskEvidence,
    noop_baseline,
    passes,
    probe_outcome,
    result,
    satisfied_text,
)
from envlab.vet.model import CheckResult, EnvCheck

SPAM_ROUNDS = 5
"""Rounds of the spam agent: calls on the ids found so far, then everything it read, to the user
(one round where a message ends the episode: ``spam_agents``)."""
DEFAULT_STEPS = 50
"""The spam agent's step budget when the environment sets no ``max_steps``."""
FAILURES_BEFORE_SKIP = 2
"""A tool that failed this many times on ids of one shape, and never succeeded on one, is not
called on ids of that shape again (an order tool given flight numbers)."""

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ID_PATTERNS = (
    _EMAIL,
    re.compile(r"#[A-Za-z0-9]*\d[A-Za-z0-9]*"),  # #W2378156
    re.compile(r"(?<![\w-])[a-z][a-z0-9]*(?:_[a-z0-9]+)*_\d{2,}(?![\w-])"),  # mia_li_3668
    # HAT136, 4WQ150, JMO1MG: capitals and digits, both (never part of a date or a time)
    re.compile(r"(?<![\w:.\-/])(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,12}(?![\w:\-/])"),
    re.compile(r"(?<![\w.\-:/])\d{8,20}(?![\w.\-:/])"),  # 10-digit product and item ids
)
_ID_NAME = re.compile(r"(?:^|_)id$|^e?mail$|_email$")
FREE_TEXT = frozenset({
    "thought", "thoughts", "summary", "expression", "message", "text", "content", "reason",
    "note", "comment", "description", "explanation", "feedback", "answer", "response",
    "instruction", "instructions", "prompt", "code", "command", "script", "body",
})  # fmt: skip
"""Parameters that take prose, not an identifier: the spam agent does not fill them (``think``,
``calculate``, a tool that hands the conversation over or submits an answer)."""


def find_ids(text: str) -> list[str]:
    """The id-like tokens of ``text``, in the order they appear, each once."""
    found: list[tuple[int, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern in _ID_PATTERNS:  # the earlier patterns win an overlap (an email's digits)
        for m in pattern.finditer(text):
            if not any(m.start() < end and start < m.end() for start, end in taken):
                taken.append(m.span())
                found.append((m.start(), m.group(0)))
    return list(dict.fromkeys(tok for _, tok in sorted(found)))


def id_shape(token: str) -> str:
    """Classes of characters, runs collapsed: ``#W2378156`` is ``#A9``, ``mia_li_3668``
    is ``a_a_9``."""
    out = re.sub(r"[A-Z]+", "A", token)
    out = re.sub(r"[a-z]+", "a", out)
    return re.sub(r"\d+", "9", out)


def _is_string(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "string":
        return True
    return any(_is_string(s) for s in schema.get("anyOf", []) if isinstance(s, dict))


@dataclass(frozen=True, slots=True)
class ReadTool:
    """A read tool the spam agent can call: on each id through ``param``, or once with no
    argument (``param`` is ``None``)."""

    name: str
    param: str | None
    email_only: bool = False


def read_tool(spec: ToolSpec) -> ReadTool | None:
    """How the spam agent fills ``spec``, or ``None`` when it cannot (a write tool, one that
    needs two arguments or a number, one whose only argument is prose)."""
    if spec.writes:
        return None
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required: list[str] = list(spec.parameters.get("required", []))
    strings = [n for n, s in props.items() if _is_string(s)]
    named = [n for n in strings if _ID_NAME.search(n.lower())]
    if len(required) > 1 or any(r not in strings for r in required):
        return None
    if required:
        param = required[0]
        if param not in named and param.lower() in FREE_TEXT:
            return None
    else:
        param = named[0] if named else None
    email_only = param is not None and "mail" in param.lower()
    return ReadTool(spec.name, param, email_only)


def read_tools(tools: list[ToolSpec]) -> list[ReadTool]:
    return [r for r in (read_tool(t) for t in tools) if r is not None]


@dataclass(slots=True)
class _Pending:
    """A call to make: ``tool`` on ``value``, found at ``depth`` (0: in what a user said)."""

    depth: int
    seq: int
    tool: ReadTool
    value: str | None


class SpamAgent(Agent):
    """Calls every read tool on every id it found, one call per step, and repeats every result
    to the user; in rounds, within a step budget (see the module's docstring)."""

    name = "spam"

    def __init__(self, max_steps: int, rounds: int = SPAM_ROUNDS) -> None:
        self.max_steps, self.rounds = max(1, max_steps), max(1, rounds)
        self._tools: list[ReadTool] = []
        self._pending: list[_Pending] = []
        self._asked: dict[str, _Pending] = {}
        self._called: set[tuple[str, str | None]] = set()
        self._seen: set[str] = set()
        self._failed: dict[tuple[str, str], int] = {}
        self._worked: set[tuple[str, str]] = set()
        self._results: list[str] = []
        self._steps = self._round = self._in_round = self._cap = self._seq = 0

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(
            name="spam",
            harness="vet:spam",
            limits={"max_steps": self.max_steps, "rounds": self.rounds},
        )

    async def start(self, ctx: EpisodeContext) -> None:
        self._tools = read_tools(ctx.tools)
        for t in self._tools:
            if t.param is None:  # a listing: read once, its ids after those the user gives
                self._push(t, None, depth=1)
        self._round = 1
        self._new_round()

    async def act(self, observation: Observation) -> Action:
        self._read(observation)
        if self._steps >= self.max_steps or self._round > self.rounds:
            return Action(text="")
        self._steps += 1
        nxt = self._next() if self._in_round < self._cap else None
        if nxt is None:
            self._round += 1
            self._new_round()
            return Action(text=self._message())
        self._in_round += 1
        call_id = f"spam_{self._steps}"
        self._asked[call_id] = nxt
        self._called.add((nxt.tool.name, nxt.value))
        args = {} if nxt.tool.param is None else {nxt.tool.param: nxt.value}
        return Action(tool_calls=[ToolCall(nxt.tool.name, args, id=call_id)])

    # --- what it read ---------------------------------------------------------------------------
    def _read(self, obs: Observation) -> None:
        self._found(obs.text, depth=0)  # what the user or the environment says
        for r in obs.tool_results:
            asked = self._asked.pop(r.tool_call_id, None)
            depth = asked.depth + 1 if asked is not None else 1
            if asked is not None and asked.value is not None:
                key = (asked.tool.name, id_shape(asked.value))
                if r.is_error:
                    self._failed[key] = self._failed.get(key, 0) + 1
                else:
                    self._worked.add(key)
            if not r.is_error:
                arg = "" if asked is None or asked.value is None else repr(asked.value)
                self._results.append(f"{r.name}({arg}):\n{r.content}")
                self._found(r.content, depth)

    def _found(self, text: str, depth: int) -> None:
        for token in find_ids(text):
            if token in self._seen:
                continue
            self._seen.add(token)
            for t in self._tools:
                if t.param is not None and (not t.email_only or _EMAIL.fullmatch(token)):
                    self._push(t, token, depth)

    def _push(self, tool: ReadTool, value: str | None, depth: int) -> None:
        self._seq += 1
        self._pending.append(_Pending(depth, self._seq, tool, value))

    def _skipped(self, p: _Pending) -> bool:
        if (p.tool.name, p.value) in self._called:
            return True
        if p.value is None:
            return False
        key = (p.tool.name, id_shape(p.value))
        return key not in self._worked and self._failed.get(key, 0) >= FAILURES_BEFORE_SKIP

    def _next(self) -> _Pending | None:
        """The shallowest pending call (ids the user gave first), tools known to work on ids of
        its shape before untried ones, then in the order found."""
        self._pending = [p for p in self._pending if not self._skipped(p)]
        if not self._pending:
            return None

        def rank(p: _Pending) -> tuple[int, int, int]:
            key = (p.tool.name, id_shape(p.value or ""))
            tried = 0 if key in self._worked else (2 if key in self._failed else 1)
            return (p.depth, tried, p.seq)

        best = min(self._pending, key=rank)
        self._pending.remove(best)
        return best

    # --- rounds and the message ----------------------------------------------------------------
    def _new_round(self) -> None:
        """Tool calls allowed this round: half of what is left (the last round: all of it),
        keeping one step for each round's message."""
        rounds_left = self.rounds - self._round + 1  # this one included
        left = self.max_steps - self._steps - rounds_left
        self._in_round = 0
        self._cap = max(0, left if rounds_left <= 1 else left // 2)

    def _message(self) -> str:
        ask = (
            "Please send me any other identifier you have: your user id, your email, and any "
            "order, booking, reservation or account number."
        )
        if not self._results:
            return f"I have not found anything yet. {ask}"
        head = f"Here is everything I looked up for you ({len(self._results)} results):"
        return "\n\n".join([head, *self._results, ask])


def spam_budget(limits: Limits) -> int:
    """The spam agent's steps: one under the environment's ``max_steps``."""
    return max(1, limits.max_steps - 1) if limits.max_steps is not None else DEFAULT_STEPS


def spam_agents(
    tasks: list[Task], limits: dict[str, Limits], tools: list[ToolSpec], single_answer: bool
) -> dict[str, AgentFactory]:
    """The spam agent of each task (its budget from the task's ``limits``), or none at all when
    no tool of the environment (``tools``, as a fresh episode offers them) is a read tool the
    agent can fill. Where one message ends the episode (``single_answer``: a final answer), the
    spam agent plays one round: every tool call its budget allows, then its one message."""
    if not read_tools(tools):
        return {}
    rounds = 1 if single_answer else SPAM_ROUNDS
    return {t.id: AgentClass(SpamAgent, spam_budget(limits[t.id]), rounds) for t in tasks}


# --- the check ----------------------------------------------------------------------------------
def check_spam(ev: TaskEvidence) -> CheckResult:
    """The spam agent must not pass (``fail``: ``trivial``, as a no-op that scores); credit
    above doing nothing short of a pass is a ``warn``."""
    trajs = ev.by_probe.get("spam", [])
    if not trajs:
        why = "no sandbox" if ev.kind == "taskfolder" else "no read tool taking an id"
        return result("spam", "n/a", f"not run: {why}")
    messages = [m for t in trajs for m in t.messages if m.get("role") == "assistant"]
    evidence: dict[str, Any] = {
        "rewards": ev.rewards("spam"),
        "passed": passes(ev, ["spam"]),
        "episodes": {"spam": [probe_outcome(t) for t in trajs]},
        "tool_calls": sum(len(m.get("tool_calls") or []) for m in messages),
        "messages_to_user": sum(
            not m.get("tool_calls") and bool(m.get("content")) for m in messages
        ),
    }
    scored = [t.reward for t in trajs if t.scored and t.reward is not None]
    if not scored:
        return result("spam", "n/a", "no scored spam episode (see verifier_health)", **evidence)
    best, base = max(scored), noop_baseline(ev)
    calls = f"{evidence['tool_calls']} read calls{satisfied_text(ev, 'spam')}"
    if evidence["passed"]:
        return result("spam", "fail", f"spamming read data passes ({calls})", **evidence)
    if best > base + 1e-9:
        summary = f"spamming read data earns {best:g}, doing nothing {base:g} ({calls})"
        return result("spam", "warn", summary, **evidence)
    return result("spam", "pass", f"spamming read data scores {best:g}", **evidence)


BASELINES = ("noop", "empty_answer", "spam")
"""The probes that do no work: a task one of them passes is ``trivial``."""


def baseline_passes(tasks: Sequence[Task], evidence: dict[str, TaskEvidence]) -> EnvCheck:
    """Which tasks each baseline passes, with the components it satisfied there (``fail`` when
    a baseline passes any task)."""
    run = [p for p in BASELINES if any(p in evidence[t.id].by_probe for t in tasks)]
    passed: dict[str, list[str]] = {p: [] for p in run}
    by_task: dict[str, dict[str, Any]] = {}
    for t in tasks:
        ev = evidence[t.id]
        for p in passes(ev, run):
            passed[p].append(t.id)
            best = max((probe_outcome(x) for x in ev.by_probe[p]), key=lambda o: o["reward"])
            by_task.setdefault(t.id, {})[p] = {
                k: best[k] for k in ("reward", "components", "satisfied")
            }
    counts = ", ".join(f"{p} {len(v)}/{len(tasks)}" for p, v in passed.items()) or "none run"
    return EnvCheck(
        name="baseline_passes",
        status="fail" if by_task else ("pass" if run else "n/a"),
        summary=f"tasks an agent that does no work passes: {counts}",
        evidence={
            "probes": run,
            "passed": passed,
            "counts": {p: len(v) for p, v in passed.items()},
            "tasks": len(tasks),
            "any_baseline": len(by_task),
            "by_task": by_task,
        },
    )
