"""The oracle that verifies its writes (``OracleAgent(verify_writes=True)``): it reads each
write's record back through the tools and repeats a write the read does not show, at most
``max_repeats`` times. Clean, it scores what the plain oracle scores; stale reads make it
repeat writes, and the repeats are graded as what they are."""

from __future__ import annotations

from typing import Any

import pytest

from envlab.agents import load_agent
from envlab.agents.scripted import OracleAgent
from envlab.core import ConfigError, Task, Trajectory
from envlab.envs.perturb import perturb
from envlab.envs.tau.spec import TauAirline, TauRetail
from tests.support.play import play


def calls(tr: Trajectory) -> list[tuple[str, dict[str, Any], str]]:
    """Every call of the episode with its result: (tool, arguments, result text)."""
    out = []
    for s in tr.steps:
        for c, r in zip(s.action.tool_calls, s.observation.tool_results, strict=True):
            out.append((c.name, c.arguments, r.content))
    return out


def gold_writes(t: Task) -> list[dict[str, Any]]:
    writes = t.metadata["write_tools"]
    return [a for a in t.answer["actions"] if a["name"] in writes and not a["refused"]]


def first_task(spec: TauRetail, tool: str) -> Task:
    return next(t for t in spec.tasks() if [a["name"] for a in gold_writes(t)] == [tool])


@pytest.mark.parametrize("reward", ["tau", "strict"])
@pytest.mark.parametrize("domain", [TauRetail, TauAirline])
async def test_clean_it_scores_the_oracles_score_on_every_task(domain: Any, reward: str) -> None:
    spec = domain(reward=reward)
    read_backs, rewards = 0, set()
    for t in spec.tasks():
        agent = OracleAgent(verify_writes=True)
        tr, plain = await play(spec, agent, t), await play(spec, OracleAgent(), t)
        assert tr.status == "ok" and tr.reward == plain.reward, t.id
        assert agent.repeated == []  # every read-back agreed
        rewards.add(tr.reward)
        read_backs += sum(c.id.startswith("verify_") for s in tr.steps for c in s.action.tool_calls)
    if domain is TauRetail:
        assert rewards == {1.0}
        # every write the tools carry out is read back (retail: each names its record)
        assert read_backs == sum(len(gold_writes(t)) for t in spec.tasks())
    assert read_backs > 0


async def test_a_stale_read_back_repeats_the_write_and_strict_grades_the_repeat() -> None:
    """The read-back of an address change answers from before the change (stale=1): the
    oracle takes it as not applied and sends it again. The tool carries the repeat out (an
    address set twice), so the state is right (tau: 1.0) but the repeat came without the
    user's yes: strict's confirmed_writes gate zeroes it."""
    for reward, want in (("tau", 1.0), ("strict", 0.0)):
        spec = perturb(TauRetail(reward=reward), "stale=1")
        t = first_task(spec, "modify_pending_order_address")
        agent = OracleAgent(verify_writes=True)
        tr = await play(spec, agent, t)
        assert agent.repeated == ["modify_pending_order_address"]
        writes = [c for c in calls(tr) if c[0] == "modify_pending_order_address"]
        assert len(writes) == 2 and writes[0][1] == writes[1][1]
        assert not writes[1][2].startswith("Error")  # the repeat ran
        faults = [f for s in tr.steps for f in s.info.get("faults", [])]
        # both read-backs were stale; the second answered from just before the repeat, which
        # shows the first write: the oracle stopped there
        assert [(f["tool"], f["writes"]) for f in faults] == [
            ("get_order_details", 1),
            ("get_order_details", 2),
        ]
        assert tr.reward == want
        if reward == "strict":
            assert tr.gated_by == "confirmed_writes"


async def test_a_repeat_the_tool_refuses_ends_the_verification() -> None:
    """A cancellation read back stale is sent again; the tool refuses it (the order is no
    longer pending): the oracle stops there, and the refusal changes nothing (tau: 1.0)."""
    spec = perturb(TauRetail(), "stale=1")
    t = first_task(spec, "cancel_pending_order")
    agent = OracleAgent(verify_writes=True)
    tr = await play(spec, agent, t)
    cancels = [c for c in calls(tr) if c[0] == "cancel_pending_order"]
    assert agent.repeated == ["cancel_pending_order"] and len(cancels) == 2
    assert cancels[1][2] == "Error: non-pending order cannot be cancelled"
    assert tr.reward == 1.0


@pytest.mark.parametrize("max_repeats", [0, 1, 3])
async def test_repeats_are_bounded(max_repeats: int) -> None:
    """stale=1:9: every read-back answers from before every write so far, so no repeat is
    ever shown: the oracle stops after max_repeats of them."""
    spec = perturb(TauRetail(), "stale=1:9")
    t = first_task(spec, "modify_pending_order_address")
    agent = OracleAgent(verify_writes=True, max_repeats=max_repeats)
    tr = await play(spec, agent, t)
    writes = [c for c in calls(tr) if c[0] == "modify_pending_order_address"]
    reads = [c for c in calls(tr) if c[0] == "get_order_details"]
    assert len(agent.repeated) == max_repeats and len(writes) == 1 + max_repeats
    assert len(reads) >= 1 + max_repeats  # each write read back (the gold reads too)
    assert tr.status == "ok" and tr.reward == 1.0  # the same address, set again


async def test_transient_errors_are_retried_and_read_backs_too() -> None:
    """transient=1: every new call fails once; the write and its read-back are each sent
    again, the read-back agrees, nothing is repeated."""
    spec = perturb(TauRetail(reward="strict"), "transient=1")
    for t in spec.tasks(n=12):
        agent = OracleAgent(verify_writes=True)
        tr = await play(spec, agent, t)
        assert tr.reward == 1.0 and agent.repeated == []


async def test_a_read_back_that_is_not_a_record_proves_nothing() -> None:
    """inject=1 over stale=1: the read-back answers from before the write and ends with an
    injected notice, so it is not a JSON record: it cannot tell, and nothing is repeated."""
    spec = perturb(TauRetail(), "inject=1,stale=1")
    t = first_task(spec, "modify_pending_order_address")
    agent = OracleAgent(verify_writes=True)
    tr = await play(spec, agent, t)
    faults = {(f["fault"], f["call_id"]) for s in tr.steps for f in s.info.get("faults", [])}
    read_back = next(c for c in ids(tr) if c.startswith("verify_"))
    assert {("stale", read_back), ("inject", read_back)} <= faults
    assert agent.repeated == [] and tr.reward == 1.0


def ids(tr: Trajectory) -> list[str]:
    return [c.id for s in tr.steps for c in s.action.tool_calls]


def test_the_option_is_recorded_and_checked() -> None:
    spec = load_agent("oracle", verify_writes=True).spec
    assert spec.harness == "scripted:oracle+verify_writes"
    assert spec.limits == {"max_repeats": 2} and spec.privileged
    assert load_agent("oracle").spec.harness == "scripted:oracle"
    for bad in ({"verify_writes": "yes"}, {"verify_writes": True, "max_repeats": -1}):
        with pytest.raises(ConfigError):
            load_agent("oracle", **bad)
