"""A replay grades in private: nothing of the reference session (its arguments, its id, the id
of the session whose log answered a call) reaches what the agent sees (observations, the step's
``info``, ``state()``), nor the trajectory the episode leaves; the grader alone gets the match
results (``ReplayEpisode.grading_state()``), and grades as before."""

from __future__ import annotations

import json
from typing import Any

from envlab.agents.scripted import OracleAgent
from envlab.core import Action, Agent, AgentClass, Environment, Reward, Task, ToolCall, Trajectory
from envlab.envs.replay import ReplaySpec
from envlab.envs.replay.episode import ReplayEpisode
from envlab.envs.replay.index import canonical
from envlab.rollout import EpisodeHooks
from tests.envs.replay_samples import TOOLS, Scripted, call, result, run_all, sessions_of
from tests.support.play import play

REF_ID, OTHER_ID = "ref-session-5b1c", "other-session-a2e9"
REF_READ = {"account": "acct-77310"}
REF_WRITE = {"source": "acct-77310", "to": "lndlrd-99812", "amount": 800}
OTHER_WRITE = {"source": "acct-11111", "to": "lndlrd-22222", "amount": 800}
SECRETS = (REF_ID, OTHER_ID, "77310", "99812")
"""What the agent never learns from the user: the sessions' ids and the reference's arguments
(the other session's write is one the probing agent sends itself)."""

REFERENCE = {
    "session_id": REF_ID,
    "task": "pay-rent",
    "goal": "Pay this month's rent to the landlord.",
    "tools": TOOLS,
    "writes": ["transfer"],
    "outcome": {"success": True},
    "messages": [
        {"role": "user", "content": "Please pay my rent to the landlord, as every month."},
        call("c1", "get_balance", REF_READ),
        result("c1", '{"balance": 900}'),
        {"role": "assistant", "content": "Shall I pay the 800 of rent now (yes/no)?"},
        {"role": "user", "content": "Yes."},
        call("c2", "transfer", REF_WRITE),
        result("c2", '{"ok": true}'),
        {"role": "assistant", "content": "Paid."},
    ],
}
OTHER = {
    "session_id": OTHER_ID,
    "task": "pay-rent",
    "tools": TOOLS,
    "writes": ["transfer"],
    "outcome": {"success": False},
    "messages": [
        {"role": "user", "content": "Pay my rent."},
        call("o1", "transfer", OTHER_WRITE),
        result("o1", "Error: the account is closed", is_error=True),
        {"role": "assistant", "content": "Sorry, that failed."},
    ],
}
PLACEHOLDER_WRITE = {"source": "acct-XXXXX", "to": "lndlrd-XXXXX", "amount": 800}
PLACEHOLDER_READ = {"account": "acct-XXXXX"}


async def _matches(env: Environment, reward: Reward | None) -> dict[str, Any]:
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, ReplayEpisode)
    return {"matches": unwrapped.grading_state()["matches"]}


async def play_matches(
    spec: ReplaySpec, agent: Agent, task: Task
) -> tuple[Trajectory, list[dict[str, Any]]]:
    """One episode, and every call's match as the grader saw it (for the tests: a hook reads the
    private state after the grade; the trajectory of a real run holds none of it)."""
    t = await play(spec, agent, task, hooks=EpisodeHooks(after_grade=_matches))
    return t, t.info["after_grade"]["matches"]


def rent(**config: Any) -> ReplaySpec:
    return ReplaySpec(sessions_of([REFERENCE, OTHER]), digest="private", **config)


def fuzzy() -> ReplaySpec:
    return rent(match="fuzzy", fuzzy_threshold=0.7)


def leaks(what: Any) -> list[str]:
    text = what if isinstance(what, str) else json.dumps(what, default=str)
    return [s for s in SECRETS if s in text]


def tc(name: str, args: dict[str, Any], cid: str) -> Action:
    return Action(tool_calls=[ToolCall(name, args, id=cid)])


PROBES = [
    tc("get_balance", PLACEHOLDER_READ, "r"),  # fuzzy: the reference's read answers
    Action(text="Shall I pay the 800 of rent now (yes/no)?"),
    tc("transfer", PLACEHOLDER_WRITE, "w"),  # fuzzy: a logged write answers
    tc("transfer", OTHER_WRITE, "o"),  # exact: the other session's refusal answers
    Action(text="Done."),
]


async def test_fuzzy_placeholder_calls_learn_nothing_of_the_reference_step_by_step() -> None:
    spec = fuzzy()
    (task,) = spec.tasks()
    env = spec.new_episode()
    assert isinstance(env, ReplayEpisode)
    obs = await env.reset(task, 0)
    seen: list[Any] = [obs.text, obs.metadata, env.state()]
    for action in PROBES:
        step = await env.step(action)
        seen += [step.observation.text, step.observation.metadata, step.info, env.state()]
        seen += [r.content for r in step.observation.tool_results]
    assert leaks(seen) == []
    reward = await env.grade()
    assert reward.total == 0.0 and reward.gated_by == "no_unlogged_write"
    assert leaks(reward.details) == [] and leaks(env.state()) == []
    # the grader alone has the match results
    private = env.grading_state()
    assert private["reference"] == REF_ID
    read, write, other = private["matches"]
    assert read["match"] == "fuzzy" and read["matched_arguments"] == REF_READ
    assert write["match"] == "fuzzy" and 0.7 <= write["similarity"] < 1.0
    assert other == {**other, "match": "exact", "source": OTHER_ID, "logged_error": True}
    assert env.grading_context().state["reference"] == REF_ID


async def test_the_trajectory_of_a_probing_episode_holds_nothing_of_the_reference() -> None:
    spec = fuzzy()
    (task,) = spec.tasks()
    t = await play(spec, Scripted(list(PROBES)), task)
    assert t.reward == 0.0 and t.gated_by == "no_unlogged_write"
    assert leaks(t.to_json().decode()) == []
    assert all(set(r) == {"tool", "call_id", "unanswerable"} for s in t.steps
               for r in s.info.get("replay", []))  # fmt: skip
    assert t.info["grade"]["replay"] == {"calls": 3, "unanswerable": 0, "fuzzy": 2}


async def test_state_right_after_reset_names_no_session() -> None:
    """What ``vet`` records after reset, and what a client asks for first."""
    spec = rent()
    env = spec.new_episode()
    await env.reset(spec.tasks()[0], 0)
    assert leaks(env.state()) == [] and "reference" not in env.state()


async def test_grading_is_unchanged_oracle_1_wrong_write_0_placeholder_0() -> None:
    for spec in (rent(), fuzzy()):
        oracle = await run_all(spec, AgentClass(OracleAgent))
        assert {t.reward for t in oracle.values()} == {1.0}
        (task,) = spec.tasks()
        ask = [Action(text="Shall I pay the 800 of rent now (yes/no)?")]
        read, write = tc("get_balance", REF_READ, "r"), tc("transfer", REF_WRITE, "w")
        right = await one(spec, task, [read, *ask, write, Action(text="Paid.")])
        assert right.reward == 1.0
        wrong = await one(spec, task, [*ask, tc("transfer", OTHER_WRITE, "w")])
        assert wrong.reward == 0.0 and wrong.gated_by == "no_unlogged_write"
        placeholder = await one(spec, task, [*ask, tc("transfer", PLACEHOLDER_WRITE, "w")])
        assert placeholder.reward == 0.0 and placeholder.gated_by == "no_unlogged_write"


async def test_the_reference_refusal_still_excuses_exactly_and_privately() -> None:
    """Whether a refused write counted (the reference's own exact refusal does not) is decided
    on the private state: the public state shows no ``writes`` that would tell it."""
    spec = rent()
    env = spec.new_episode()
    (task,) = spec.tasks()
    await env.reset(task, 0)
    await env.step(tc("transfer", OTHER_WRITE, "o"))
    assert "writes" not in env.state() and "reads" not in env.state()
    assert env.grading_state()["writes"] == [["transfer", canonical(OTHER_WRITE)]]


async def one(spec: ReplaySpec, task: Task, actions: list[Action]) -> Trajectory:
    return await play(spec, Scripted(actions), task)
