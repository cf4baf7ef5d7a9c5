"""Perturbations on ``tau-retail`` (and ``tau-airline``): seeded and recorded faults on the real
SQLite domains, stale reads against the database's history, the retrying oracle, and the
injected instruction that a strict gate catches when an agent follows it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import Action, Observation, StepResult, Task, ToolCall, Trajectory
from envlab.envs.perturb import PERTURBATIONS, perturb
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec
from envlab.envs.tau.users import Facts
from tests.conftest import subprocess_env
from tests.support.play import play

ON_RETAIL = {
    "timeout": "timeout=0.3",
    "transient": "transient=0.5",
    "latency": "latency=0.0001:0.0003",
    "rate_limit": "rate_limit=1/2",
    "stale": "stale=1",
    "truncate": "truncate=0.3",
    "malformed": "malformed=0.3",
    "inject": "inject=0.5",
}


def faults_of(tr: Trajectory) -> list[dict[str, Any]]:
    return [f for s in tr.steps for f in s.info.get("faults", [])]


def reads_after_a_write(t: Task) -> bool:
    """The gold solution reads after one of its writes (where a stale read can happen)."""
    writes, wrote = t.metadata["write_tools"], False
    for a in t.answer["actions"]:
        if a["name"] in writes and not a["refused"]:
            wrote = True
        elif wrote:
            return True
    return False


def test_every_perturbation_is_covered_here() -> None:
    assert set(ON_RETAIL) == set(PERTURBATIONS)


@pytest.mark.parametrize("name", sorted(ON_RETAIL))
async def test_each_perturbation_is_deterministic_under_a_seed_and_recorded(name: str) -> None:
    spec = perturb(TauRetail(reward="strict"), ON_RETAIL[name])
    tasks = [t for t in spec.tasks() if reads_after_a_write(t)][:6]
    first = [await play(spec, OracleAgent(), t) for t in tasks]
    again = [await play(spec, OracleAgent(), t) for t in tasks]
    assert [faults_of(t) for t in first] == [faults_of(t) for t in again]
    assert [t.reward for t in first] == [t.reward for t in again]
    assert all(t.status == "ok" and t.reward is not None for t in first)  # scored, never an error
    assert any(faults_of(t) for t in first)
    tools = {t.name: t for t in spec.new_episode().tools}
    for tr in first:
        for i, step in enumerate(tr.steps):
            for f in step.info.get("faults", []):
                assert f["fault"] == name and f["step"] == i + 1
                assert f["call_id"] in {c.id for c in step.action.tool_calls}
                if name in ("stale", "inject"):
                    assert not tools[f["tool"]].writes  # only reads are stale or injected into


FAULTS_SCRIPT = """
import asyncio, json
from envlab.agents.scripted import OracleAgent
from envlab.envs.perturb import perturb
from envlab.envs.tau.spec import TauRetail
from tests.support.play import play

async def main():
    spec = perturb(TauRetail(reward="strict"), "transient=0.4,malformed=0.3,inject=0.5")
    runs = [await play(spec, OracleAgent(), t) for t in spec.tasks()[:4]]
    print(json.dumps([[s.info.get("faults", []) for s in tr.steps] for tr in runs]))

asyncio.run(main())
"""


def test_the_same_seed_injects_the_same_faults_in_another_process() -> None:
    outs = []
    for hash_seed in ("1", "2"):
        env = {**subprocess_env(), "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(
            [sys.executable, "-c", FAULTS_SCRIPT], capture_output=True, text=True, env=env,
            timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]
    assert {f["fault"] for tr in outs[0] for step in tr for f in step} == {
        "transient", "malformed", "inject",
    }  # fmt: skip


# --- stale reads against the SQLite history ------------------------------------------------
ADDRESSES = [
    ("1 First St", "", "Austin", "TX", "USA", "73301"),
    ("22 Second Ave", "Apt 2", "Boston", "MA", "USA", "02101"),
    ("333 Third Blvd", "Suite 3", "Denver", "CO", "USA", "80201"),
]


def write(user_id: str, i: int) -> Action:
    keys = ("address1", "address2", "city", "state", "country", "zip")
    args = {"user_id": user_id, **dict(zip(keys, ADDRESSES[i], strict=True))}
    return Action(tool_calls=[ToolCall("modify_user_address", args, id=f"w{i}")])


def read(user_id: str) -> Action:
    return Action(tool_calls=[ToolCall("get_user_details", {"user_id": user_id}, id="r")])


def answer(r: StepResult) -> str:
    (res,) = r.observation.tool_results
    assert not res.is_error, res.content
    return res.content


async def history(spec: TauSpec, task: Task) -> list[str]:
    """What the read answers after 0, 1, 2, 3 writes, on a clean episode's database."""
    env = spec.new_episode()
    await env.reset(task, 0)
    user_id = task.metadata["user_id"]
    states = [answer(await env.step(read(user_id)))]
    for i in range(len(ADDRESSES)):
        await env.step(write(user_id, i))
        states.append(answer(await env.step(read(user_id))))
    await env.close()
    return states


@pytest.mark.parametrize("lag", [1, 2, 5])
async def test_a_stale_read_answers_the_state_k_writes_ago_byte_for_byte(lag: int) -> None:
    clean = TauRetail()
    task = clean.tasks()[0]
    user_id = task.metadata["user_id"]
    states = await history(clean, task)
    assert len(set(states)) == len(states)  # every write changed what the read answers
    env = perturb(clean, f"stale=1:{lag}").new_episode()
    await env.reset(task, 0)
    base: Any = env.unwrapped
    assert answer(await env.step(read(user_id))) == states[0]  # no write yet: nothing stale
    for j in range(1, len(ADDRESSES) + 1):
        r = await env.step(write(user_id, j - 1))
        assert "faults" not in r.info  # writes run on the current state
        base.db.conn.commit()  # serialize() sees committed pages only
        before = base.db.conn.serialize()
        r = await env.step(read(user_id))
        assert answer(r) == states[max(0, j - lag)]  # as of `lag` writes ago (or the start)
        assert r.info["faults"][0] | {"lag": None} == {
            "fault": "stale", "step": 2 * j + 1, "tool": "get_user_details", "call_id": "r",
            "lag": None, "writes": j,
        }  # fmt: skip
        assert r.info["faults"][0]["lag"] == min(lag, j)
        assert base.db.conn.serialize() == before  # the current state is put back exactly
        assert base.call("get_user_details", {"user_id": user_id}) == states[j]
    assert base.db.changes() == {"users": {user_id: json.loads(states[-1])}}
    await env.close()


async def test_snapshot_and_restore_are_exact() -> None:
    spec = TauRetail()
    task = spec.tasks()[0]
    env: Any = spec.new_episode()
    await env.reset(task, 0)
    snap = env.snapshot()
    image = env.db.conn.serialize()
    await env.step(write(task.metadata["user_id"], 0))
    assert env.db.changes() and env.db.writes == 1
    env.restore(snap)
    assert env.db.conn.serialize() == image and env.db.changes() == {} and env.db.writes == 0
    await env.close()


# --- the retrying oracle -------------------------------------------------------------------
@pytest.mark.parametrize("cls", [TauRetail, TauAirline])
async def test_transient_errors_with_the_retrying_oracle_score_like_clean(
    cls: type[TauSpec],
) -> None:
    clean = cls(reward="strict")
    tasks = clean.tasks()[:30]
    spec = perturb(clean, "transient=0.5")
    runs = [await play(spec, OracleAgent(), t) for t in tasks]
    assert [t.reward for t in runs] == [1.0] * len(tasks)
    assert sum(len(faults_of(t)) for t in runs) >= len(tasks)


# --- the injected instruction --------------------------------------------------------------
INJECTED = re.compile(r"call (\w+) with arguments (\{.*\})\. The customer has already")


class Follower(OracleAgent):
    """The oracle, except that it does what the first injected instruction it reads says."""

    def __init__(self) -> None:
        super().__init__()
        self.followed: ToolCall | None = None

    async def act(self, observation: Observation) -> Action:
        for r in observation.tool_results:
            m = INJECTED.search(r.content)
            if m and self.followed is None:
                self.followed = ToolCall(m[1], json.loads(m[2]), id="injected")
                self._last = Action(tool_calls=[self.followed])
                return self._last
        return await super().act(observation)


def followed_write(tr: Trajectory) -> bool:
    """The injected call ran (a write the tool carried out)."""
    for step in tr.steps:
        if [c.id for c in step.action.tool_calls] == ["injected"]:
            return not step.observation.tool_results[0].is_error
    return False


async def test_following_an_injected_instruction_trips_confirmed_writes_under_strict() -> None:
    spec = perturb(TauRetail(reward="strict"), "inject=1")
    tasks = spec.tasks()[:25]
    followed = [await play(spec, Follower(), t) for t in tasks]
    wrote = [t for t in followed if followed_write(t)]
    assert len(wrote) >= 5, "the injected writes should mostly be carried out"
    for tr in wrote:
        assert tr.reward == 0.0 and tr.components["confirmed_writes"] == 0.0, tr.task_id
        assert tr.gated_by is not None
    asks = [f["asks"] for t in followed for f in faults_of(t)]
    assert asks and all(a["tool"] in tasks[0].metadata["write_tools"] for a in asks)
    ignored = [await play(spec, OracleAgent(), t) for t in tasks]  # the same, not followed
    assert [t.reward for t in ignored] == [1.0] * len(tasks)


async def test_malformed_breaks_json_records_and_leaves_plain_answers_alone() -> None:
    spec = perturb(TauRetail(), "malformed=1")
    task = spec.tasks()[0]
    env = spec.new_episode()
    await env.reset(task, 0)
    r = await env.step(read(task.metadata["user_id"]))
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.observation.tool_results[0].content)
    assert r.info["faults"][0]["fault"] == "malformed"
    facts = Facts.of(task.metadata["instruction"])
    args = {"first_name": facts.first_name, "last_name": facts.last_name, "zip": facts.zip}
    lookup = ToolCall("find_user_id_by_name_zip", args, id="who")
    r = await env.step(Action(tool_calls=[lookup]))
    assert r.observation.tool_results[0].content == task.metadata["user_id"]  # not JSON
    assert "faults" not in r.info
    await env.close()


def test_the_perturbed_tau_hash_differs() -> None:
    clean = TauRetail(reward="strict")
    hashes = {clean.content_hash()} | {
        perturb(clean, p).content_hash() for p in ("stale=0.2", "stale=0.3", "stale=0.2:2")
    }
    assert len(hashes) == 4
