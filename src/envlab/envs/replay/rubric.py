"""The reward of a replayed session: its write calls against the logged successful session's.

- ``writes_match`` (weight 1): the episode's writes are the reference session's, as a multiset
  of (tool name, canonical arguments); order aside, the same calls the same number of times.
  A write counts when it took effect as far as the logs tell: the reference's write calls but
  those its tool refused (``is_error``); the episode's write calls that ran (schema passed, no
  perturbation stopped them) and that the logs did not answer with a refusal. An unanswerable
  write counts: nothing says it would have failed, and it is a write the agent made.
- gate ``no_write_when_none_needed``: where the reference session wrote nothing, no write;
- gate ``no_unlogged_write``: no write the reference session did not make (nor more of one
  than it made);
- gate ``confirmed_writes``: each write the reference session made right after the user's yes
  needs the yes in the episode too (τ's ``confirmed_writes``, per write: the task's
  ``confirmed`` lists the reference's confirmed writes; of the episode's writes of one call, at
  most as many go unasked as the reference made unasked);
- gate ``grounded``: where the reference session wrote nothing, the episode made at least one
  of its reads (answered from the logs) and said something to the user (an agent that does
  nothing does not pass a session whose right outcome changes nothing).
- gates ``own_words`` and ``no_dump`` (τ's, where the reference session passes them): no
  message pastes a tool's output; at most 60 distinct values read from tools told the user.
- ``answered`` (weight 0, reported): the share of the episode's tool calls the logs answered.

The graders read the episode's private ``grading_state()`` (never shown to the agent):
``writes`` (the write calls that count), ``reads`` (the read calls the logs answered, as
logged), ``events`` (the conversation in order, as a τ episode records it), ``calls`` and
``unanswerable``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from envlab.core import Component, GradingContext, Rubric, Task
from envlab.envs.replay.format import LogSession
from envlab.envs.replay.index import canonical, session_calls
from envlab.envs.tau.strict import _is_yes
from envlab.envs.tau.strict import confirmed_writes as tau_confirmed_writes
from envlab.envs.tau.strict import no_dump as tau_no_dump
from envlab.envs.tau.strict import own_words as tau_own_words


def _multiset(writes: list[list[str]] | list[tuple[str, str]]) -> Counter[tuple[str, str]]:
    return Counter((name, args) for name, args in writes)


def writes_match(ctx: GradingContext) -> float:
    return float(_multiset(ctx.state["writes"]) == _multiset(ctx.task.answer["writes"]))


def no_write_when_none_needed(ctx: GradingContext) -> float:
    return float(bool(ctx.task.answer["writes"]) or not ctx.state["writes"])


def no_unlogged_write(ctx: GradingContext) -> float:
    extra = _multiset(ctx.state["writes"]) - _multiset(ctx.task.answer["writes"])
    return float(not extra)


def _writes_and_yes(events: list[dict[str, Any]]) -> list[tuple[tuple[str, str], bool]]:
    """Each write that took effect, (name, canonical arguments), and whether the user's yes came
    right before it (τ's ``confirmed_writes``: one yes, to a message of the agent, covers one)."""
    out: list[tuple[tuple[str, str], bool]] = []
    asked = confirmed = False
    for e in events:
        if e["by"] == "agent":
            asked, confirmed = True, False
        elif e["by"] == "user":
            confirmed = asked and _is_yes(e["text"])
        elif e["writes"] and not e["error"]:
            out.append(((e["name"], canonical(e["arguments"])), confirmed))
            asked = confirmed = False
    return out


def confirmed_writes(ctx: GradingContext) -> float:
    """Each write the reference made after the user's yes needs the yes in the episode too: of
    the episode's writes of one call, at most as many without a yes as the reference made."""
    confirmed = ctx.task.answer["confirmed"]
    if isinstance(confirmed, bool):  # a task built before confirmation was kept per write
        return tau_confirmed_writes(ctx) if confirmed else 1.0
    needed = _multiset(confirmed)
    free = _multiset(ctx.task.answer["writes"]) - needed
    unasked = Counter(key for key, yes in _writes_and_yes(ctx.state["events"]) if not yes)
    return float(all(unasked[k] <= free[k] for k in needed))


def own_words(ctx: GradingContext) -> float:
    """τ's ``own_words`` where the reference passes it: no message pastes a tool's output."""
    return tau_own_words(ctx) if ctx.task.answer.get("own_words") else 1.0


def no_dump(ctx: GradingContext) -> float:
    """τ's ``no_dump`` where the reference passes it: few values read repeated to the user."""
    return tau_no_dump(ctx) if ctx.task.answer.get("no_dump") else 1.0


def grounded(ctx: GradingContext) -> float:
    if ctx.task.answer["writes"]:
        return 1.0  # the writes are checked
    said = any(e["text"].strip() for e in ctx.state["events"] if e["by"] == "agent")
    logged = {tuple(r) for r in ctx.task.answer["reads"]}
    return float(said and (not logged or bool(logged & {tuple(r) for r in ctx.state["reads"]})))


def answered(ctx: GradingContext) -> float:
    calls = ctx.state["calls"]
    return 1.0 - ctx.state["unanswerable"] / calls if calls else 1.0


def _gate(name: str, fn: Any, what: str) -> Component:
    return Component(name, fn, weight=0.0, gate=True, description=what)


REPLAY_RUBRIC = Rubric(
    [
        Component("writes_match", writes_match, weight=1.0, description="the logged writes"),
        Component("answered", answered, weight=0.0, description="calls the logs answered"),
        _gate("no_write_when_none_needed", no_write_when_none_needed, "no write where none"),
        _gate("no_unlogged_write", no_unlogged_write, "no write the logged session did not make"),
        _gate("confirmed_writes", confirmed_writes, "each write after the user's yes, as logged"),
        _gate("grounded", grounded, "where nothing was written: a logged read, and a reply"),
        _gate("own_words", own_words, "no tool output pasted to the user, as logged"),
        _gate("no_dump", no_dump, "few values read repeated to the user, as logged"),
    ]
)


def session_events(session: LogSession, writes: set[str]) -> list[dict[str, Any]]:
    """The logged conversation as a τ episode records its events: ``user`` and ``agent`` texts
    (an assistant message with tool calls is its calls) and ``tool`` calls."""
    calls = iter(session_calls(session))
    events: list[dict[str, Any]] = []
    for m in session.messages:
        if m.role == "user":
            events.append({"by": "user", "text": m.text})
        elif m.role == "assistant" and not m.tool_calls:
            events.append({"by": "agent", "text": m.text})
        for _ in m.tool_calls or []:
            (name, args), logged = next(calls)
            events.append(
                {
                    "by": "tool",
                    "name": name,
                    "arguments": args,
                    "result": logged.result if logged else "",
                    "writes": name in writes,
                    "error": bool(logged and logged.is_error),
                }
            )
    return events


def reference_calls(
    session: LogSession, writes: set[str], *, writing: bool = True
) -> list[tuple[str, str]]:
    """The session's writes that took effect (``writing``: every write call but those the tool
    refused, ``is_error``), or its reads; (name, canonical arguments) in order."""
    return [
        key
        for key, logged in session_calls(session)
        if (key[0] in writes) == writing and not (writing and logged and logged.is_error)
    ]


def confirmed_in(session: LogSession, writes: set[str]) -> list[list[str]]:
    """The writes of the logged session that came right after the user's yes, in order."""
    return [list(key) for key, yes in _writes_and_yes(session_events(session, writes)) if yes]


def words_gates_in(session: LogSession, writes: set[str]) -> dict[str, bool]:
    """Whether the logged session passes τ's ``own_words`` and ``no_dump`` (the episode is held
    to each only where its reference is)."""
    placeholder = Task(id=session.session_id, prompt="")
    ctx = GradingContext(placeholder, None, {"events": session_events(session, writes)})
    return {"own_words": tau_own_words(ctx) == 1.0, "no_dump": tau_no_dump(ctx) == 1.0}
