"""The rewards of a τ episode: τ-bench's own (``tau``) and envlab's (``strict``).

``tau`` is τ-bench's: 1 when the final database equals the one the gold actions produce (here:
the records that changed are exactly the task's ``gold_diff``) and every required output string
is in the agent's messages to the user (lower case, commas removed, as τ-bench compares).

``strict`` is ``tau`` behind gates for what it misses (each named in the reward when it trips):

- ``required_writes``: every write action of the gold solution was taken, with its arguments;
- ``confirmed_writes``: every write came after the user said yes to the agent's question;
- ``identity_established``: no write for a user before that user's identity was established (an
  identity lookup returned them, or the user stated their user id); a write is for the user in
  its ``user_id`` argument or the owner of the record it returns;
- ``no_collateral``: nothing changed outside the records the task changes;
- ``own_words``: no message to the user pastes a tool's output (a data dump is not an answer);
- ``stated_outputs``: each required output is in a message that says it, with at most 12 numbers
  and ids, not buried in a dump (reformatted or not);
- ``grounded``: where the right outcome changes nothing, the agent looked the user's records up
  (a read with their user id, or one that returns a record they own) and said something to the
  user: a refusal is an answer only when it rests on the facts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from envlab.core import Component, GradingContext, Rubric

IDENTITY_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")
_YES = re.compile(
    r"\b(yes|yeah|yep|sure|confirm(?:ed)?|go ahead|proceed|please do|correct)\b", re.I
)
_DUMP_MIN_CHARS = 80
_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")
_VALUE = re.compile(r"#?\b[\w.@-]*\d[\w.@-]*\b")
"""A number or an id (a token with a digit in it): what a dump of records is made of."""
_MAX_VALUES = 12
_OWNER = re.compile(r'"user_id": "([^"]+)"')


def _events(ctx: GradingContext, by: str) -> Iterator[dict[str, Any]]:
    return (e for e in ctx.state["events"] if e["by"] == by)


def _writes(ctx: GradingContext) -> list[dict[str, Any]]:
    return [e for e in _events(ctx, "tool") if e["writes"] and not e["error"]]


def _gold_writes(ctx: GradingContext) -> list[dict[str, Any]]:
    """The gold solution's writes that τ-bench's tools carried out (not the ones they refused)."""
    writes = ctx.task.metadata["write_tools"]
    return [a for a in ctx.task.answer["actions"] if a["name"] in writes and not a["refused"]]


def db_match(ctx: GradingContext) -> float:
    return float(ctx.state["changes"] == ctx.task.answer["gold_diff"])


def outputs(ctx: GradingContext) -> float:
    said = [e["text"].lower().replace(",", "") for e in _events(ctx, "agent")]
    return float(all(any(o.lower() in s for s in said) for o in ctx.task.answer["outputs"]))


def tau(ctx: GradingContext) -> float:
    return min(db_match(ctx), outputs(ctx))


def _same_call(event: dict[str, Any], gold: dict[str, Any]) -> bool:
    args = event.get("arguments") or {}
    return event["name"] == gold["name"] and all(
        args.get(k) == v for k, v in gold["kwargs"].items()
    )


def required_writes(ctx: GradingContext) -> float:
    taken = _writes(ctx)
    for gold in _gold_writes(ctx):
        match = next((e for e in taken if _same_call(e, gold)), None)
        if match is None:
            return 0.0
        taken.remove(match)
    return 1.0


def confirmed_writes(ctx: GradingContext) -> float:
    asked = confirmed = False
    for e in ctx.state["events"]:
        if e["by"] == "agent":
            asked, confirmed = True, False
        elif e["by"] == "user":
            confirmed = asked and bool(_YES.search(e["text"]))
        elif e["writes"] and not e["error"]:
            if not confirmed:
                return 0.0
            asked = confirmed = False  # one yes covers one write
    return 1.0


def _users_of(event: dict[str, Any]) -> set[str]:
    """The users a write is for: its ``user_id`` argument, or the owner in the record it returns."""
    users = set(_OWNER.findall(event["result"]))
    if isinstance(arg := (event.get("arguments") or {}).get("user_id"), str):
        users.add(arg)
    return users


def identity_established(ctx: GradingContext) -> float:
    known: set[str] = set()
    for e in ctx.state["events"]:
        if e["by"] == "user":
            known.update(_USER_ID.findall(e["text"]))
        elif e["by"] != "tool" or e["error"]:
            continue
        elif e["name"] in IDENTITY_TOOLS:
            known.add(e["result"].strip())
        elif e["writes"]:
            users = _users_of(e) or {ctx.task.metadata["user_id"]}
            if not users <= known:
                return 0.0
    return 1.0


def no_collateral(ctx: GradingContext) -> float:
    gold = ctx.task.answer["gold_diff"]
    changed = ((t, k) for t, records in ctx.state["changes"].items() for k in records)
    return float(all(k in gold.get(t, {}) for t, k in changed))


def own_words(ctx: GradingContext) -> float:
    results = [
        e["result"]
        for e in _events(ctx, "tool")
        if not e["error"] and len(e["result"]) >= _DUMP_MIN_CHARS
    ]
    said = [e["text"] for e in _events(ctx, "agent")]
    return float(not any(r in s for r in results for s in said))


def stated_outputs(ctx: GradingContext) -> float:
    """Every required output is told in a message that says it, not one that buries it among
    many values (a dump of records, reformatted or not): at most ``_MAX_VALUES`` numbers and
    ids in the message that carries it."""
    said = [e["text"] for e in _events(ctx, "agent")]
    for output in ctx.task.answer["outputs"]:
        needle = output.lower()
        if not any(
            needle in s.lower().replace(",", "") and len(set(_VALUE.findall(s))) <= _MAX_VALUES
            for s in said
        ):
            return 0.0
    return 1.0


def _about(event: dict[str, Any], user_id: str) -> bool:
    args = event.get("arguments") or {}
    return args.get("user_id") == user_id or f'"user_id": "{user_id}"' in event["result"]


def grounded(ctx: GradingContext) -> float:
    if _gold_writes(ctx):
        return 1.0  # the writes are checked; nothing more to ask here
    if not any(e["text"].strip() for e in _events(ctx, "agent")):
        return 0.0
    user_id = ctx.task.metadata["user_id"]
    done = [e for e in _events(ctx, "tool") if not e["error"] and not e["writes"]]
    return float(any(_about(e, user_id) for e in done))


def _gate(name: str, fn: Callable[[GradingContext], float], what: str) -> Component:
    return Component(name, fn, weight=0.0, gate=True, description=what)


_TAU = [
    Component("tau", tau, weight=1.0, description="database equals the gold one and outputs said"),
    Component("db_match", db_match, weight=0.0, description="final database equals the gold one"),
    Component("outputs", outputs, weight=0.0, description="every required output told the user"),
]

TAU_RUBRIC = Rubric(list(_TAU))
STRICT_RUBRIC = Rubric(
    [
        *_TAU,
        _gate("required_writes", required_writes, "every gold write taken, with its arguments"),
        _gate("confirmed_writes", confirmed_writes, "each write after the user said yes"),
        _gate("identity_established", identity_established, "no write before identity known"),
        _gate("no_collateral", no_collateral, "nothing changed outside the task's records"),
        _gate("own_words", own_words, "no tool output pasted to the user"),
        _gate("stated_outputs", stated_outputs, "each output said, not buried in a dump"),
        _gate("grounded", grounded, "a no-change outcome rests on a lookup and a reply"),
    ]
)
RUBRICS = {"tau": TAU_RUBRIC, "strict": STRICT_RUBRIC}
