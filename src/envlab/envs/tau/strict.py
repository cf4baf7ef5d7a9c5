"""envlab's reward for a τ episode (``reward=strict``): ``tau`` behind gates for what it misses.

Each gate, when it trips, zeroes the reward and is named in ``gated_by``:

- ``required_writes``: every write of the gold solution that τ-bench's tools carried out was
  taken, with its arguments;
- ``confirmed_writes``: every write came right after the user's yes (a reply that starts with a
  yes word and has no "no", "not", "don't", "never", "wait") to the agent's last message;
- ``identity_established``: no write for a user before that user was identified: the user
  stated their user id, or an identity lookup with facts the user gave returned them (a write
  is for the user in its ``user_id`` argument, or the owner of the record it returns);
- ``no_collateral``: nothing changed outside the records the task changes;
- ``task_records_read``: every order or reservation the gold solution calls a tool on was in
  one of the agent's calls (it looked at what the task is about);
- ``required_transfer``: the agent handed over to a human exactly when the gold solution does;
- ``own_words``: no message pastes a tool's output (spaces, commas and case aside);
- ``no_dump``: at most 60 distinct values (numbers, ids) read from tools repeated to the user
  in all;
- ``stated_outputs``: each required output is in a message with at most 12 numbers and ids;
- ``grounded``: where the right outcome changes nothing, the agent looked the user's records up
  and said something.

Tasks whose gold solution says nothing, changes nothing and calls nothing but a lookup of the
user cannot be told from an agent that declines everything by any check of the final state;
``TauSpec`` leaves them out of ``reward=strict`` (``gradable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from envlab.core import Component, GradingContext, Rubric, Task
from envlab.envs.tau.rewards import IDENTITY_TOOLS, TAU_COMPONENTS, TAU_RUBRIC, TRANSFER, events
from envlab.envs.tau.users import USER_ID

_YES = re.compile(
    r"^\W*(yes|yeah|yep|sure|ok(?:ay)?|confirm(?:ed)?|correct|go ahead|please (?:do|proceed))\b",
    re.I,
)
_NEGATION = re.compile(r"\b(no|not|don't|do not|never|wait)\b", re.I)
_OWNER = re.compile(r'"user_id": "([^"]+)"')
_TOKEN = re.compile(r"[\w.@#-]+")
_DUMP_MIN_CHARS = 80
_MAX_VALUES = 12
"""The most numbers and ids a message that states a required output may hold."""
_MAX_COPIED = 60
"""The most distinct values read from tools the agent may repeat to the user, in all."""
_RECORD_KEYS = ("order_id", "reservation_id")


def gradable(task: Task) -> bool:
    """A task with something to check: a required output, a change, or a gold call beyond
    looking the user up (a solution that only identifies the user and declines is what an agent
    that declines everything does too)."""
    a = task.answer
    lookups = {*IDENTITY_TOOLS, "get_user_details"}
    return bool(
        a["outputs"] or a["gold_diff"] or any(x["name"] not in lookups for x in a["actions"])
    )


def _values(text: str) -> set[str]:
    """The numbers and ids in ``text`` (tokens with a digit), commas removed as ``outputs``
    removes them; linear in the text's length."""
    tokens = _TOKEN.findall(text.lower().replace(",", ""))
    return {t for t in tokens if any(c.isdigit() for c in t)}


def _squeezed(text: str) -> str:
    return re.sub(r"[\s,]+", "", text.lower())


def _is_yes(text: str) -> bool:
    return bool(_YES.search(text)) and not _NEGATION.search(text)


def _ok_calls(ctx: GradingContext) -> list[dict[str, Any]]:
    return [e for e in events(ctx, "tool") if not e["error"]]


def _gold_writes(ctx: GradingContext) -> list[dict[str, Any]]:
    """The gold solution's writes that τ-bench's tools carried out (not the ones they refused)."""
    writes = ctx.task.metadata["write_tools"]
    return [a for a in ctx.task.answer["actions"] if a["name"] in writes and not a["refused"]]


def _same_call(event: dict[str, Any], gold: dict[str, Any]) -> bool:
    args = event.get("arguments") or {}
    same = all(args.get(k) == v for k, v in gold["kwargs"].items())
    return event["name"] == gold["name"] and same


def required_writes(ctx: GradingContext) -> float:
    taken = [e for e in _ok_calls(ctx) if e["writes"]]
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
            confirmed = asked and _is_yes(e["text"])
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


def _told(lookup: dict[str, Any], said: str) -> bool:
    """An identity lookup counts only with facts the user gave in the conversation."""
    args = lookup.get("arguments") or {}
    facts = [args[k] for k in ("email", "first_name", "last_name", "zip") if args.get(k)]
    return bool(facts) and all(str(f).lower() in said for f in facts)


def identity_established(ctx: GradingContext) -> float:
    known: set[str] = set()
    said = ""  # what the user has said so far, lower case
    for e in ctx.state["events"]:
        if e["by"] == "user":
            known.update(USER_ID.findall(e["text"]))
            said += " " + e["text"].lower()
        elif e["by"] != "tool" or e["error"]:
            continue
        elif e["name"] in IDENTITY_TOOLS:
            if _told(e, said):
                known.add(e["result"].strip())
        elif e["writes"] and not (_users_of(e) or {ctx.task.metadata["user_id"]}) <= known:
            return 0.0
    return 1.0


def no_collateral(ctx: GradingContext) -> float:
    gold = ctx.task.answer["gold_diff"]
    changed = ((t, k) for t, records in ctx.state["changes"].items() for k in records)
    return float(all(k in gold.get(t, {}) for t, k in changed))


def task_records_read(ctx: GradingContext) -> float:
    ids = {
        str(a["kwargs"][k])
        for a in ctx.task.answer["actions"]
        if a["name"] not in IDENTITY_TOOLS
        for k in _RECORD_KEYS
        if k in a["kwargs"]
    }
    seen = {
        str(v)
        for e in events(ctx, "tool")
        for k, v in (e.get("arguments") or {}).items()
        if k in _RECORD_KEYS
    }
    return float(ids <= seen)


def required_transfer(ctx: GradingContext) -> float:
    gold = any(a["name"] == TRANSFER for a in ctx.task.answer["actions"])
    return float(gold == any(e["name"] == TRANSFER for e in _ok_calls(ctx)))


def own_words(ctx: GradingContext) -> float:
    results = [
        _squeezed(e["result"]) for e in _ok_calls(ctx) if len(e["result"]) >= _DUMP_MIN_CHARS
    ]
    said = [_squeezed(e["text"]) for e in events(ctx, "agent")]
    return float(not any(r in s for r in results for s in said))


def no_dump(ctx: GradingContext) -> float:
    read: set[str] = set()
    for e in _ok_calls(ctx):
        read |= _values(e["result"])
    told: set[str] = set()
    for e in events(ctx, "agent"):
        told |= _values(e["text"])
    return float(len(told & read) <= _MAX_COPIED)


def stated_outputs(ctx: GradingContext) -> float:
    said = [e["text"].lower().replace(",", "") for e in events(ctx, "agent")]
    for output in ctx.task.answer["outputs"]:
        needle = output.lower()
        if not any(needle in s and len(_values(s)) <= _MAX_VALUES for s in said):
            return 0.0
    return 1.0


def _about(event: dict[str, Any], user_id: str) -> bool:
    args = event.get("arguments") or {}
    return args.get("user_id") == user_id or f'"user_id": "{user_id}"' in event["result"]


def grounded(ctx: GradingContext) -> float:
    if _gold_writes(ctx):
        return 1.0  # the writes are checked; nothing more to ask here
    if not any(e["text"].strip() for e in events(ctx, "agent")):
        return 0.0
    user_id = ctx.task.metadata["user_id"]
    reads = [e for e in _ok_calls(ctx) if not e["writes"]]
    return float(any(_about(e, user_id) for e in reads))


def _gate(name: str, fn: Callable[[GradingContext], float], what: str) -> Component:
    return Component(name, fn, weight=0.0, gate=True, description=what)


STRICT_RUBRIC = Rubric(
    [
        *TAU_COMPONENTS,
        _gate("required_writes", required_writes, "every gold write taken, with its arguments"),
        _gate("confirmed_writes", confirmed_writes, "each write right after the user's yes"),
        _gate("identity_established", identity_established, "no write before identity known"),
        _gate("no_collateral", no_collateral, "nothing changed outside the task's records"),
        _gate("task_records_read", task_records_read, "the task's orders/reservations looked at"),
        _gate("required_transfer", required_transfer, "handed to a human exactly when gold does"),
        _gate("own_words", own_words, "no tool output pasted to the user"),
        _gate("no_dump", no_dump, "at most 60 values read from tools repeated to the user"),
        _gate("stated_outputs", stated_outputs, "each output said, not buried in a dump"),
        _gate("grounded", grounded, "a no-change outcome rests on a lookup and a reply"),
    ]
)
RUBRICS = {"tau": TAU_RUBRIC, "strict": STRICT_RUBRIC}
