"""Action probes: agents that act on the tools and then answer wrong.

A grader must pay for the task done, not for actions taken. Each probe here calls tools with
values it has seen (``vet.seen``) and then gives a wrong final answer:

- ``actions_all``: every tool (read tools first, write tools too), then again with the next
  values seen, within the step budget;
- ``actions_one``: one call of the first tool;
- ``actions_exhaust``: the first tool, again and again, until the step budget;
- ``write:TOOL.PARAM=VALUE``: every read tool once, then one write tool with one of the values
  its schema offers (an enum value, a quoted word of its description): a status field the
  agent can set.

``check_paid_by_actions`` judges them as the trivial strategies are judged (``vet.trivial``):
a probe whose passes beat chance, or whose credit above doing nothing is significant, shows a
grader paid by actions: its tasks are quarantined.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

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
    ToolSpec,
    Trajectory,
)
from envlab.vet.checks import TaskEvidence, passes, result
from envlab.vet.model import CheckResult, EnvCheck
from envlab.vet.seen import Seen, fill, quoted_in, variants
from envlab.vet.trivial import judge_strategies

WRONG_ANSWER = "I could not find the answer."
MAX_PROBE_CALLS = 40
"""Tool calls of one action probe at most (fewer when the environment's step budget is lower)."""
MAX_ROUNDS = 4
"""Rounds of ``actions_all``: every tool once per round, with the next values seen."""
MAX_WRITE_PROBES = 8
"""``write:`` probes per task at most (one write tool and one value each)."""
Mode = Literal["all", "one", "exhaust", "write"]


def ordered_tools(tools: list[ToolSpec]) -> list[ToolSpec]:
    """Read tools before write tools (reads find the ids writes need), each in listed order."""
    return [t for t in tools if not t.writes] + [t for t in tools if t.writes]


@dataclass(frozen=True, slots=True)
class WriteValue:
    tool: str
    param: str
    value: Any
    choices: int

    @property
    def probe(self) -> str:
        return f"write:{self.tool}.{self.param}={self.value}"


def write_values(tools: list[ToolSpec]) -> list[WriteValue]:
    """The values write tools offer for a parameter: enum values, or the quoted words of the
    parameter's description (``status: 'open' or 'resolved'``)."""
    out: list[WriteValue] = []
    for t in (t for t in tools if t.writes):
        for name, schema in t.parameters.get("properties", {}).items():
            values = list(schema.get("enum") or quoted_in(str(schema.get("description", ""))))
            out += [WriteValue(t.name, name, v, len(values)) for v in values if v is not None]
    return out[:MAX_WRITE_PROBES]


class ActionAgent(Agent):
    """Calls tools with values seen (see the module's docstring), then answers wrong."""

    name = "actions"

    def __init__(self, mode: Mode, max_calls: int, write: WriteValue | None = None) -> None:
        self.mode, self.max_calls, self.write = mode, max(1, max_calls), write
        self._seen = Seen()
        self._tools: list[ToolSpec] = []
        self._made: set[str] = set()
        self._calls = self._round = self._index = 0
        self._answered = False

    @property
    def spec(self) -> AgentSpec:
        label = self.write.probe if self.write else f"actions_{self.mode}"
        return AgentSpec(name=label, harness="vet:actions", limits={"calls": self.max_calls})

    async def start(self, ctx: EpisodeContext) -> None:
        self._tools = ordered_tools(ctx.tools)
        self._seen.read(ctx.prompt)
        self._seen.read(ctx.system_prompt or "")
        self._seen.read_tools(ctx.tools)

    async def act(self, observation: Observation) -> Action:
        self._seen.read(observation.text)
        for r in observation.tool_results:
            self._seen.read(r.content)
        if self._answered:
            return Action(text="")
        call = self._next_call() if self._calls < self.max_calls else None
        if call is None:
            self._answered = True
            return Action(text=WRONG_ANSWER)
        self._calls += 1
        call.id = f"vet_{self._calls}"
        return Action(tool_calls=[call])

    def _next_call(self) -> ToolCall | None:
        if not self._tools:
            return None
        if self.mode == "one":
            return self._call(self._tools[0], 0) if self._calls == 0 else None
        if self.mode == "exhaust":
            t = self._tools[0]
            return self._call(t, self._calls % max(1, variants(t.parameters, self._seen)))
        if self.mode == "write":
            return self._write_call()
        return self._all_call()

    def _all_call(self) -> ToolCall | None:
        while self._round < MAX_ROUNDS:
            while self._index < len(self._tools):
                t = self._tools[self._index]
                self._index += 1
                call = self._call(t, self._round)
                if call is not None:
                    return call
            self._round, self._index = self._round + 1, 0
        return None

    def _write_call(self) -> ToolCall | None:
        reads = [t for t in self._tools if not t.writes]
        while self._index < len(reads):
            self._index += 1
            call = self._call(reads[self._index - 1], 0)
            if call is not None:
                return call
        w = self.write
        tool = next((t for t in self._tools if w is not None and t.name == w.tool), None)
        if w is None or tool is None or self._index > len(reads):
            return None
        self._index += 1
        args = {**fill(tool.parameters, self._seen), w.param: w.value}
        return ToolCall(tool.name, args)

    def _call(self, tool: ToolSpec, i: int) -> ToolCall | None:
        """``tool`` with variant ``i`` of its arguments; ``None`` when made already (and the
        variant is past what was seen)."""
        args = fill(tool.parameters, self._seen, i)
        key = tool.name + json.dumps(args, sort_keys=True, default=str)
        if key in self._made and self.mode != "exhaust":
            return None
        self._made.add(key)
        return ToolCall(tool.name, args)


def action_agents(tools: list[ToolSpec], max_steps: int | None) -> dict[str, AgentFactory]:
    """The action probes of an environment whose episodes offer ``tools`` (none without tools),
    each within one step under ``max_steps`` (the last step answers)."""
    if not tools:
        return {}
    calls = min(MAX_PROBE_CALLS, max(1, (max_steps or MAX_PROBE_CALLS + 1) - 1))
    out: dict[str, AgentFactory] = {
        f"actions_{m}": AgentClass(ActionAgent, m, calls) for m in ("all", "one", "exhaust")
    }
    for w in write_values(tools):
        out[w.probe] = AgentClass(ActionAgent, "write", calls, w)
    return out


def action_chances(tools: list[ToolSpec]) -> dict[str, float]:
    """The pass rate each action probe may reach by chance: a ``write:`` probe that sets one of
    k values does the right write on 1/k of the tasks when the task is to set it."""
    if not tools:
        return {}
    out = {f"actions_{m}": 0.0 for m in ("all", "one", "exhaust")}
    out.update({w.probe: 1.0 / max(1, w.choices) for w in write_values(tools)})
    return out


def check_paid_by_actions(
    tasks: list[Task], evidence: dict[str, TaskEvidence], chances: dict[str, float]
) -> tuple[EnvCheck, dict[str, CheckResult]]:
    """Action probes that answer wrong must earn no more than doing nothing (``vet.trivial``'s
    statistical rule): a grader they pay is paid by actions, not by the task done."""
    if not chances:
        na = result("paid_by_actions", "n/a", "no tools: no action probe")
        return (
            EnvCheck(name="paid_by_actions", status="n/a", summary="no tools to call"),
            {t.id: na for t in tasks},
        )
    excused = {p: {t.id for t in tasks if _did_the_task(evidence[t.id], p)} for p in chances}
    j = judge_strategies(tasks, evidence, chances, excused)
    env = EnvCheck(
        name="paid_by_actions",
        status="fail" if j.flagged else "pass",
        summary=(
            "probes that call tools and answer wrong are paid: " + j.describe()
            if j.flagged
            else f"{len(chances)} action probes (tool calls, then a wrong answer) earn no "
            "more than doing nothing"
        ),
        evidence=j.evidence(),
    )
    per: dict[str, CheckResult] = {}
    for t in tasks:
        won = j.won_on(t.id)
        if not won:
            per[t.id] = result(
                "paid_by_actions", "pass", "no action probe that scores here earns on it"
            )
            continue
        got = j.rewards(evidence[t.id], won)
        calls = {p: _calls_made(evidence[t.id], p) for p in won}
        per[t.id] = result(
            "paid_by_actions",
            "fail",
            f"{', '.join(f'{p} scores {r:g}' for p, r in got.items())} after calling "
            f"{'; '.join(f'{c}' for c in calls.values())} and answering {WRONG_ANSWER!r}: the "
            "grader pays for actions, not for the task done; grade the answer or the state "
            "the task asks for, never the calls made or a field the agent can set",
            strategies=won,
            rewards=got,
            calls=calls,
        )
    return env, per


def _tool_calls(t: Trajectory) -> list[tuple[str, str]]:
    """``(name, canonical arguments)`` of the calls of an episode that were not refused."""
    errors = {
        str(m.get("tool_call_id"))
        for m in t.messages
        if m.get("role") == "tool" and str(m.get("content", "")).startswith("Error")
    }
    out: list[tuple[str, str]] = []
    for m in t.messages:
        for c in m.get("tool_calls") or []:
            if str(c.get("id")) in errors:
                continue
            f = c.get("function", {})
            try:
                args = json.dumps(json.loads(f.get("arguments") or "{}"), sort_keys=True)
            except ValueError:
                args = str(f.get("arguments"))
            out.append((str(f.get("name")), args))
    return out


def _did_the_task(ev: TaskEvidence, probe: str) -> bool:
    """Whether ``probe``'s credit on this task is not for actions alone: doing nothing passes
    it too, or the probe passed having made every call that changes state the reference
    solution makes (the task is to do that write, and the blind probe happened to do it; where
    no tool is marked as writing, as in a game whose tool calls are its moves: every call the
    reference solution makes)."""
    if passes(ev, ["noop"]):
        return True
    if not passes(ev, [probe]):  # credit short of a pass is never the task done
        return False
    oracle = ev.by_probe.get("oracle", [])
    writes = set(ev.write_tools)  # no tool marked as writing (a game's moves): every call
    wanted = {c for t in oracle[:1] for c in _tool_calls(t) if not writes or c[0] in writes}
    if not wanted:
        return False
    return any(wanted <= set(_tool_calls(t)) for t in ev.by_probe.get(probe, []))


def _calls_made(ev: TaskEvidence, probe: str) -> str:
    trajs = ev.by_probe.get(probe, [])
    names: list[str] = []
    for t in trajs[:1]:
        for m in t.messages:
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                names.append(f"{f.get('name')}({f.get('arguments', '')[:60]})")
    if not names:
        return "no tool"
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more
