"""Red team of the τ grade: what an agent can do to be scored 1 under ``reward=strict`` without
doing the task, what gets an honest agent scored 0, and the episode's contract.

Each test is an attack, written first; the ten that found holes (a task-blind agent that looks the
user up and declines, a comma-interleaved dump, an identity lookup with facts the user never gave,
a "no" read as a yes, a quadratic regex, an honest confirmation answered with identity facts, a
clarifying question taken for the end, calls after a transfer, a non-string text scored as the
environment's failure) pass since the fixes in ``envs/tau/strict.py``, ``users.py``,
``episode.py`` and ``rollout/episode.py``."""

from __future__ import annotations

import re

import pytest

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    EpisodeOrderError,
    GradingContext,
    Observation,
    Status,
    Task,
    ToolCall,
)
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec
from envlab.envs.tau.strict import confirmed_writes
from envlab.vet.spam import SpamAgent, spam_budget
from tests.envs.tau.test_tau_env import Script, both, first, has_write, oracle_script, run_all
from tests.support.play import play

ASK_ID = "Please give me your user id, or your email, or your name and zip code."


def task_of(spec: TauSpec, task_id: str) -> Task:
    return next(t for t in spec.tasks() if t.id == task_id)


def calls(*pairs: tuple[str, dict]) -> list[Action]:
    return [Action(tool_calls=[ToolCall(n, a, id=f"a{i}")]) for i, (n, a) in enumerate(pairs)]


# --- (a) strict reward 1 without doing the task ---------------------------------------------------
class LookupThenRefuse(Agent):
    """Knows nothing of the task: asks who the user is, looks them up, refuses. No reasoning."""

    name = "lookup-refuse"

    def __init__(self) -> None:
        self.stage = 0

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="lookup-refuse", harness="test:lookup-refuse")

    async def act(self, obs: Observation) -> Action:
        self.stage += 1
        if self.stage == 1:
            return Action(text=ASK_ID)
        if self.stage == 2 and (m := re.search(r"\b[a-z]+_[a-z]+_\d{3,5}\b", obs.text)):
            return calls(("get_user_details", {"user_id": m.group(0)}))[0]
        if self.stage == 2 and (m := re.search(r"[\w.+-]+@[\w-]+\.\w+", obs.text)):
            return calls(("find_user_id_by_email", {"email": m.group(0)}))[0]
        if self.stage == 2 and (
            m := re.search(r"name is (\w+) (\w+) and my zip code is (\d+)", obs.text)
        ):
            f, last, z = m.groups()
            args = {"first_name": f, "last_name": last, "zip": z}
            return calls(("find_user_id_by_name_zip", args))[0]
        results = obs.tool_results
        if (
            self.stage == 3
            and results
            and results[0].name.startswith("find")
            and not results[0].is_error
        ):
            return calls(("get_user_details", {"user_id": results[0].content.strip()}))[0]
        return Action(text="I am sorry, I am unable to help with that request.")


async def test_a_task_blind_lookup_then_refuse_agent_passes_nothing_strict() -> None:
    strict = await run_all(TauAirline(reward="strict"), "test", AgentClass(LookupThenRefuse))
    passed = sorted(k for k, r in strict.items() if r == 1.0)
    assert not passed, f"{len(passed)}/{len(strict)} passed: {passed}"


async def test_a_task_whose_answer_is_a_transfer_needs_the_transfer() -> None:
    spec = TauAirline(reward="strict")
    task = task_of(spec, "tau-airline-test-038")
    assert [a["name"] for a in task.answer["actions"]] == ["transfer_to_human_agents"]
    traj = await play(spec, LookupThenRefuse(), task)
    assert "transfer_to_human_agents" not in [
        c.name for s in traj.steps for c in s.action.tool_calls
    ]
    assert traj.reward == 0.0


class CommaSpam(SpamAgent):
    """vet's spam probe, with every character of its dump separated by a comma: τ-bench's
    comparison removes commas (so every value read is 'said'), while ``own_words`` (verbatim)
    and ``stated_outputs`` (counts values in the text with the commas) see single digits."""

    def _message(self) -> str:
        ask = "Please send me your user id, your email, and any order or reservation number."
        if not self._results:
            return f"I have not found anything yet. {ask}"
        return f"Here is what I looked up: {','.join(chr(10).join(self._results))} {ask}"


async def test_a_comma_interleaved_dump_passes_nothing_strict() -> None:
    spec = TauAirline(reward="strict")
    agent = AgentClass(CommaSpam, spam_budget(spec.limits(spec.tasks()[0])))
    strict = await run_all(spec, "test", agent)
    passed = sorted(k for k, r in strict.items() if r == 1.0)
    assert not passed, f"{len(passed)}/{len(strict)} passed: {passed}"


async def test_the_plain_spam_dump_is_stopped_by_own_words() -> None:
    """Defended: the same dump without the commas trips own_words (the task with an output)."""
    spec = TauAirline(reward="strict")
    task = task_of(spec, "tau-airline-test-044")
    traj = await play(spec, SpamAgent(spam_budget(spec.limits(task))), task)
    assert traj.reward == 0.0 and traj.components["own_words"] == 0.0


def _self_sourced_identity(task: Task) -> list[Action]:
    """Read the order the user named, its owner's record, then 'look the owner up' by the email
    found there: the user is never asked who they are."""
    from envlab.envs.tau.db import Database
    from envlab.envs.tau.retail import RETAIL_SCHEMA

    db = Database("retail", RETAIL_SCHEMA)
    order = next(
        a["kwargs"]["order_id"] for a in task.answer["actions"] if "order_id" in a["kwargs"]
    )
    owner = db.get("orders", order)["user_id"]
    email = db.get("users", owner)["email"]
    db.close()
    return calls(
        ("get_order_details", {"order_id": order}),
        ("get_user_details", {"user_id": owner}),
        ("find_user_id_by_email", {"email": email}),
    )


async def test_an_identity_lookup_with_data_the_user_never_gave_does_not_identify() -> None:
    spec = TauRetail()
    task = task_of(spec, "tau-retail-test-017")  # "a private person": never asked who they are
    gold = oracle_script(spec, task)
    rest = [
        a
        for a in gold
        if "user id" not in a.text
        and not (a.tool_calls and a.tool_calls[0].name.startswith("find_user_id"))
    ]
    tau, strict = await both(TauRetail, task, [*_self_sourced_identity(task), *rest])
    assert tau == 1.0  # the attack reaches the gold state and says what it must
    assert strict["identity_established"] == 0.0 and strict["total"] == 0.0


def _confirmed_after(task: Task, answer: str) -> float:
    """``confirmed_writes`` of: the agent asks, the user answers ``answer``, the agent writes."""
    gold = next(a for a in task.answer["actions"] if a["name"] in task.metadata["write_tools"])
    write = {"by": "tool", "name": gold["name"], "arguments": gold["kwargs"], "result": "{}"}
    events = [
        {"by": "agent", "text": "Shall I proceed (yes/no)?"},
        {"by": "user", "text": answer},
        {**write, "writes": True, "error": False},
    ]
    return confirmed_writes(GradingContext(task, None, {"events": events, "changes": {}}))


@pytest.mark.parametrize(
    "no", ["No, please do not proceed.", "No, that is not correct.", "I'm not sure, no."]
)
def test_a_no_from_the_user_is_not_a_yes(no: str) -> None:
    assert _confirmed_after(first(TauRetail(), has_write), no) == 0.0


def test_an_answer_without_a_yes_word_is_not_a_yes() -> None:
    task = first(TauRetail(), has_write)
    assert _confirmed_after(task, "No, I don't want that.") == 0.0
    assert _confirmed_after(task, "Yes, please proceed.") == 1.0


# --- (b) an honest agent scored wrong -------------------------------------------------------------
async def test_a_confirmation_that_lists_the_new_zip_gets_a_yes() -> None:
    spec = TauRetail()
    task = task_of(spec, "tau-retail-test-017")
    kw = next(
        a["kwargs"] for a in task.answer["actions"] if a["name"] == "modify_pending_order_address"
    )
    detail = (
        f"I will change the shipping address of order {kw['order_id']} to {kw['address1']}, "
        f"{kw['address2']}, {kw['city']}, {kw['state']}, {kw['country']}, zip {kw['zip']}. "
        "Shall I proceed (yes/no)?"
    )
    actions = [
        Action(text=detail) if "Shall I proceed" in a.text else a for a in oracle_script(spec, task)
    ]
    tau, strict = await both(TauRetail, task, actions)
    assert tau == 1.0
    assert strict["confirmed_writes"] == 1.0 and strict["total"] == 1.0


# --- (c) the episode's contract -------------------------------------------------------------------
async def test_no_tool_runs_after_the_transfer_in_the_same_action() -> None:
    spec = TauRetail()
    task = task_of(spec, "tau-retail-test-017")
    gold = next(a for a in task.answer["actions"] if a["name"] == "modify_pending_order_address")
    env = spec.new_episode()
    await env.reset(task, 0)
    transfer = ToolCall("transfer_to_human_agents", {"summary": "over to you"}, id="t")
    result = await env.step(
        Action(tool_calls=[transfer, ToolCall(gold["name"], gold["kwargs"], id="w")])
    )
    try:
        assert result.done
        assert env.db.changes() == {} and len(result.observation.tool_results) == 1
    finally:
        await env.close()


async def test_a_step_after_the_end_is_refused_both_ways() -> None:
    spec = TauAirline()
    task = spec.tasks()[0]
    env = spec.new_episode()
    await env.reset(task, 0)
    r = await env.step(Action(tool_calls=[ToolCall("transfer_to_human_agents", {"summary": "x"})]))
    assert r.done
    with pytest.raises(EpisodeOrderError):
        await env.step(Action(text="one more thing"))
    with pytest.raises(EpisodeOrderError):
        await env.step(Action(tool_calls=[ToolCall("get_user_details", {"user_id": "x"})]))
    await env.close()


async def test_the_agent_saying_stop_does_not_end_the_conversation() -> None:
    spec = TauAirline()
    traj = await play(spec, Script([Action(text="###STOP###"), Action(text="###STOP### done")]))
    user_turns = [s for s in traj.steps if s.info.get("user")]
    assert len(user_turns) >= 2 and not user_turns[0].observation.text.count("###STOP###")


async def test_non_json_and_wrong_arguments_are_the_agents_tool_errors() -> None:
    spec = TauRetail(reward="strict")
    bad = [
        ToolCall("get_user_details", "{not json", id="a"),  # type: ignore[arg-type]
        ToolCall("get_user_details", "[1, 2]", id="b"),  # type: ignore[arg-type]
        ToolCall("get_user_details", {"user_id": 7}, id="c"),
        ToolCall("get_user_details", {"user_id": "x", "extra": 1}, id="d"),
        ToolCall("no_such_tool", {}, id="e"),
    ]
    traj = await play(spec, Script([Action(tool_calls=bad)]))
    assert traj.status is Status.OK and traj.tool_errors == 5 and traj.reward == 0.0


async def test_a_huge_plain_message_is_scored_not_an_error() -> None:
    spec = TauRetail(reward="strict")
    traj = await play(spec, Script([Action(text="help me " * 250_000)]))
    assert traj.status.scored and traj.reward == 0.0 and traj.grader_failed is None


async def test_a_user_id_the_agent_says_does_not_identify_the_user() -> None:
    """The agent naming the user id itself is not the user stating it (airline: no lookups)."""
    spec = TauAirline()
    task = first(spec, has_write)
    uid = task.metadata["user_id"]
    actions = [
        Action(text=f"I have your account: {uid}.") if "user id" in a.text else a
        for a in oracle_script(spec, task)
    ]
    _, strict = await both(TauAirline, task, actions)
    assert strict["identity_established"] == 0.0 and strict["total"] == 0.0


async def test_one_yes_does_not_cover_two_writes_in_one_action() -> None:
    spec = TauAirline()
    task = next(
        t
        for t in spec.tasks()
        if sum(
            a["name"] in t.metadata["write_tools"] and not a["refused"] for a in t.answer["actions"]
        )
        >= 2
    )
    script = oracle_script(spec, task)
    # two writes behind one question: drop every question but the first
    asks = [i for i, a in enumerate(script) if "Shall I proceed" in a.text]
    one_yes = [a for i, a in enumerate(script) if i not in asks[1:]]
    _, strict = await both(TauAirline, task, one_yes)
    assert strict["confirmed_writes"] == 0.0 and strict["total"] == 0.0


async def test_a_write_then_revert_of_another_users_record_is_still_gated() -> None:
    """Writing a stranger's address and writing it back leaves no net change (no_collateral is
    blind to it), but the stranger was never identified: identity_established trips."""
    spec = TauRetail()
    task = task_of(spec, "tau-retail-test-017")
    from envlab.envs.tau.db import Database
    from envlab.envs.tau.retail import RETAIL_SCHEMA

    db = Database("retail", RETAIL_SCHEMA)
    other = next(u for u in db.ids("users") if u != task.metadata["user_id"])
    old = db.get("users", other)["address"]
    db.close()
    new = {**old, "address1": "1 Elm St"}
    ask = Action(text="Shall I proceed (yes/no)?")
    extra = [
        ask,
        *calls(("modify_user_address", {"user_id": other, **new})),
        ask,
        *calls(("modify_user_address", {"user_id": other, **old})),
    ]
    script = oracle_script(spec, task)
    tau, strict = await both(TauRetail, task, [*script[:-1], *extra, script[-1]])
    assert tau == 1.0 and strict["no_collateral"] == 1.0  # net: nothing changed
    assert strict["identity_established"] == 0.0 and strict["total"] == 0.0


async def test_an_action_with_no_text_is_the_agents_failure() -> None:
    traj = await play(TauRetail(reward="strict"), Script([Action(text=None)]))  # type: ignore[arg-type]
    assert traj.status.scored, (traj.status, traj.error)


async def test_a_clarifying_question_does_not_end_the_conversation() -> None:
    ask = "I can't find an order with that number. Could you check the order id, please?"
    traj = await play(TauRetail(), Script([Action(text=ask)]))
    assert "###STOP###" not in traj.steps[0].observation.text


_SLOW_GRADE = """
import asyncio
from envlab.core import Action
from envlab.envs.tau.spec import TauRetail

async def main() -> None:
    spec = TauRetail(reward="strict")
    task = next(t for t in spec.tasks() if t.answer["outputs"])
    env = spec.new_episode()
    await env.reset(task, 0)
    await env.step(Action(text=task.answer["outputs"][0] + " " + "a." * 30_000))
    print((await env.grade()).total)

asyncio.run(main())
"""


def test_grading_a_60kb_message_is_not_quadratic() -> None:
    """Not a timing assertion on a normal path: linear grading of 60 KB takes milliseconds,
    the limit is the subprocess's start plus a large margin."""
    import subprocess
    import sys

    from tests.conftest import subprocess_env

    try:
        proc = subprocess.run(
            [sys.executable, "-c", _SLOW_GRADE],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("grading one 60 KB message took more than 10 s")
    assert proc.returncode == 0, proc.stderr


def _mutants(kwargs: dict) -> list[dict]:
    out = []
    for k, v in kwargs.items():
        alts: list[object] = ["", -5, 0, 10**9]
        if isinstance(v, list):
            alts += [[], v[:-1], v * 2, [v[0]] * 3] if v else [[]]
        out += [{**kwargs, k: a} for a in alts]
    return out


async def test_mutated_gold_writes_are_answered_never_raised() -> None:
    """Defended: schema-valid but wrong arguments (empty, negative, huge, lists cut, doubled)
    on every gold write of airline test are a result or the agent's tool error, never the
    environment's exception (which would make the episode env_error, not counted)."""
    spec = TauAirline()
    for task in spec.tasks():
        for gold in task.answer["actions"]:
            if gold["name"] not in task.metadata["write_tools"]:
                continue
            for kwargs in _mutants(gold["kwargs"]):
                env = spec.new_episode()
                await env.reset(task, 0)
                try:
                    await env.call_tool(ToolCall(gold["name"], kwargs))
                finally:
                    await env.close()
