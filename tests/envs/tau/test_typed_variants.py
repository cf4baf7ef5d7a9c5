"""Differential tests of ``reward=tau`` against τ-bench's semantics, on every task of every split.

(a) the gold actions replayed score 1; (b) no actions score 1 exactly where τ-bench's would
(nothing to change, nothing to say); (c) each number, bool and numeric string of each gold
action replaced by the same value as another JSON type scores what τ-bench gives it: the
expected outcome comes from ``tau_rules`` (rules read off τ-bench's code, each with its
source), the expected database from τ-bench's data hash as ``taus_hash_text`` writes it.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from envlab.core import GradingContext, Task
from envlab.envs.tau.airline import AIRLINE_SCHEMA, AirlineTools
from envlab.envs.tau.db import Database, Schema, load_json
from envlab.envs.tau.retail import RETAIL_SCHEMA, RetailTools
from envlab.envs.tau.rewards import db_match, tau
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec
from envlab.envs.tau.tools import DomainTools
from tests.envs.tau.tau_rules import REFUSED, STORED_ONLY, WRITTEN, Variant, rule, variants

SPLITS = [("retail", "test"), ("retail", "train"), ("retail", "dev"), ("airline", "test")]
DOMAINS: dict[str, tuple[type[DomainTools], Schema, type[TauSpec]]] = {
    "retail": (RetailTools, RETAIL_SCHEMA, TauRetail),
    "airline": (AirlineTools, AIRLINE_SCHEMA, TauAirline),
}


def taus_hash_text(value: Any) -> str:
    """What τ-bench hashes (tau_bench/envs/base.py, ``to_hashable`` then ``str`` in
    ``consistent_hash``): dicts as key-sorted pairs, lists as tuples, and values inside them
    (every value of the data is inside a dict) by ``repr``: "1" is not 1."""
    return repr(_tree(value))


def _tree(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _tree(value[k])) for k in sorted(value))
    if isinstance(value, list):
        return tuple(_tree(v) for v in value)
    return value


@cache
def tasks(domain: str, split: str) -> tuple[Task, ...]:
    return tuple(DOMAINS[domain][2]().tasks(split=split))


def replay(domain: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], Database]:
    cls, schema, _ = DOMAINS[domain]
    tools = cls()
    tools.db = Database(domain, schema)
    return [tools.call(name, copy.deepcopy(kwargs)) for name, kwargs in calls], tools.db


def grade(task: Task, db: Database, said: str = "") -> GradingContext:
    state = {"changes": db.changes(), "events": [{"by": "agent", "text": said}]}
    return GradingContext(task, said, state)


def gold_calls(task: Task) -> list[tuple[str, dict[str, Any]]]:
    return [(a["name"], a["kwargs"]) for a in task.answer["actions"]]


@pytest.mark.parametrize(("domain", "split"), SPLITS)
def test_gold_replayed_scores_1_and_no_actions_score_as_taus_reward(
    domain: str, split: str
) -> None:
    rows = load_json(domain, f"tasks_{split}.json")
    pristine = Database(domain, DOMAINS[domain][1])
    for task, row in zip(tasks(domain, split), rows, strict=True):
        _, db = replay(domain, gold_calls(task))
        said = "; ".join(task.answer["outputs"])
        assert tau(grade(task, db, said)) == 1.0, task.id
        # the gold changes are changes in τ-bench's hash: each differs from its first value
        for table, records in row["gold_diff"].items():
            for key, record in records.items():
                assert taus_hash_text(record) != taus_hash_text(pristine.get(table, key))
        nothing = not row["gold_diff"] and not row["outputs"]
        assert tau(grade(task, Database(domain, DOMAINS[domain][1]))) == float(nothing)


def _found(value: Any, key: str, records: Any) -> bool:
    """Whether ``value`` (type and all) is stored under ``key`` somewhere in ``records``."""
    stack = [records]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if key in node and taus_hash_text(node[key]) == taus_hash_text(value):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _check(domain: str, task: Task, v: Variant, skipped: dict[int, Any]) -> str | None:
    calls = gold_calls(task)
    name, kwargs = calls[v.action]
    results, db = replay(domain, [*calls[: v.action], (name, v.kwargs(kwargs))])
    got, right_after = results[-1], db.changes()
    _finish(domain, calls, v, db)
    outcome, source = rule(v.tool, v.key, v.value)
    where = f"{task.id} {v.tool}.{'.'.join(map(str, v.path))}={v.value!r}: {got[:80]!r} "
    if outcome == REFUSED:
        if v.action not in skipped:
            _, skip_db = replay(domain, calls[: v.action] + calls[v.action + 1 :])
            skipped[v.action] = skip_db.changes()
        same = taus_hash_text(db.changes()) == taus_hash_text(skipped[v.action])
        if not got.startswith("Error:") or not same:
            return where + f"should be refused, nothing written ({source})"
        return None
    assert outcome == WRITTEN
    if got.startswith("Error:") or not _found(v.value, v.key, right_after):
        return where + f"should be written as sent ({source})"
    if _found(v.value, v.key, db.changes()):  # still there at the end: the hash differs
        expected = 0.0
    elif (v.tool, v.key) in STORED_ONLY:  # overwritten by a later gold call, nothing derived
        expected = 1.0
    else:
        return where + "a value computed with was overwritten: no rule for the outcome"
    if db_match(grade(task, db)) != expected:
        return where + f"should score {expected} for τ-bench's hash compare"
    return None


def _finish(domain: str, calls: list[tuple[str, dict[str, Any]]], v: Variant, db: Database) -> None:
    """Play the gold calls after the variant on the same database."""
    tools = DOMAINS[domain][0]()
    tools.db = db
    for name, kwargs in calls[v.action + 1 :]:
        tools.call(name, copy.deepcopy(kwargs))


@pytest.mark.parametrize(("domain", "split"), SPLITS)
def test_typed_variants_of_gold_arguments_score_as_taus_rules(domain: str, split: str) -> None:
    failures: list[str] = []
    checked = 0
    for task in tasks(domain, split):
        skipped: dict[int, Any] = {}
        for v in variants(task.answer["actions"]):
            checked += 1
            problem = _check(domain, task, v, skipped)
            if problem:
                failures.append(problem)
    assert checked > 0
    assert not failures, f"{len(failures)} of {checked}:\n" + "\n".join(failures[:15])
