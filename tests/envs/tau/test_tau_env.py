"""``tau-retail`` and ``tau-airline`` end to end: the oracle, the no-op agent, and attacks on the
reward that τ-bench's own reward lets through and ``reward=strict`` does not."""

from __future__ import annotations

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import Action, Agent, AgentClass, AgentSpec, Observation, Task, ToolCall
from envlab.envs.tau.db import load_json
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec
from envlab.rollout import PlannedEpisode, episode_ids, run_episodes
from tests.support.play import play

SPLITS = [(TauRetail, "test"), (TauRetail, "train"), (TauRetail, "dev"), (TauAirline, "test")]


async def run_all(spec: TauSpec, split: str, agent: AgentClass) -> dict[str, float | None]:
    tasks = spec.tasks(split=split)
    h = spec.content_hash()
    plans = [PlannedEpisode(t, 0, episode_ids(spec.name, h, t.id, 0, 0), agent) for t in tasks]
    return {t.task_id: t.reward for t in await run_episodes(spec, plans, concurrency=8)}


@pytest.mark.parametrize("reward", ["tau", "strict"])
@pytest.mark.parametrize(("cls", "split"), SPLITS)
async def test_the_oracle_scores_1_on_every_task(
    cls: type[TauSpec], split: str, reward: str
) -> None:
    rewards = await run_all(cls(reward=reward), split, AgentClass(OracleAgent))
    assert rewards and all(r == 1.0 for r in rewards.values()), {
        k: r for k, r in rewards.items() if r != 1.0
    }


@pytest.mark.parametrize(("cls", "split"), SPLITS)
async def test_the_noop_agent_passes_what_the_data_implies_under_tau_and_nothing_strict(
    cls: type[TauSpec], split: str
) -> None:
    """τ-bench's flaw: a task whose right outcome changes nothing and says nothing is passed by
    an agent that does nothing (airline test: 19 of 50, the published 38%)."""
    spec = cls()
    rows = load_json(spec.domain, f"tasks_{split}.json")
    implied = {
        f"{spec.name}-{split}-{r['index']:03d}"
        for r in rows
        if not r["gold_diff"] and not r["outputs"]
    }
    tau = await run_all(spec, split, AgentClass(NoopAgent))
    assert {k for k, r in tau.items() if r == 1.0} == implied
    strict = await run_all(cls(reward="strict"), split, AgentClass(NoopAgent))
    assert not any(r for r in strict.values())


def test_the_published_noop_rates() -> None:
    airline = load_json("airline", "tasks_test.json")
    retail = load_json("retail", "tasks_test.json")
    nothing = [r for r in airline if not r["gold_diff"] and not r["outputs"]]
    assert len(nothing) == 19 and len(airline) == 50  # 38%
    assert sum(not r["gold_diff"] and not r["outputs"] for r in retail) == 7  # 6% of 115


class Script(Agent):
    """Plays a fixed list of actions, then says nothing."""

    name = "script"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="script", harness="test:script")

    async def act(self, observation: Observation) -> Action:
        return self.actions.pop(0) if self.actions else Action(text="")


def oracle_script(spec: TauSpec, task: Task) -> list[Action]:
    return spec.new_episode().oracle_actions(task)


def first(spec: TauSpec, pred: object) -> Task:
    return next(t for t in spec.tasks() if pred(t))  # type: ignore[operator]


def has_write(t: Task) -> bool:
    return any(
        a["name"] in t.metadata["write_tools"] and not a["refused"] for a in t.answer["actions"]
    )


async def both(spec_cls: type[TauSpec], task: Task, actions: list[Action]) -> tuple[float, dict]:
    tau = await play(spec_cls(), Script(list(actions)), task)
    strict = await play(spec_cls(reward="strict"), Script(list(actions)), task)
    assert tau.reward is not None and strict.reward is not None
    return tau.reward, {"total": strict.reward, **strict.components, "gated_by": strict.gated_by}


async def test_a_write_without_the_users_yes_trips_confirmed_writes() -> None:
    spec = TauAirline()
    task = first(spec, has_write)
    actions = [a for a in oracle_script(spec, task) if "Shall I proceed" not in a.text]
    tau, strict = await both(TauAirline, task, actions)
    assert tau == 1.0 and strict["total"] == 0.0 and strict["confirmed_writes"] == 0.0


async def test_a_write_for_a_user_nobody_identified_trips_identity_established() -> None:
    spec = TauAirline()  # the gold solutions do not look the user up: they ask for the id
    task = first(spec, has_write)
    actions = [a for a in oracle_script(spec, task) if "user id" not in a.text]
    tau, strict = await both(TauAirline, task, actions)
    assert tau == 1.0 and strict["total"] == 0.0 and strict["identity_established"] == 0.0


async def test_pasting_a_tool_result_to_the_user_trips_own_words() -> None:
    spec = TauRetail()
    task = first(spec, lambda t: any(a["name"] == "get_order_details" for a in t.answer["actions"]))
    script = oracle_script(spec, task)
    reads = [a for a in script if a.tool_calls and a.tool_calls[0].name == "get_order_details"]
    env = spec.new_episode()
    await env.reset(task, 0)
    dumped = "\n".join(
        [(await env.step(a)).observation.tool_results[0].content for a in script if a in reads]
    )
    tau, strict = await both(TauRetail, task, [*script[:-1], Action(text=dumped), script[-1]])
    assert tau == 1.0 and strict["own_words"] == 0.0 and strict["total"] == 0.0


async def test_a_reformatted_dump_that_holds_the_outputs_trips_stated_outputs() -> None:
    """The attack on ``own_words``: read the user's orders and their products, repeat every
    record reformatted (not verbatim), and let the required outputs hide among the values."""
    import json

    spec = TauRetail()
    task = next(t for t in spec.tasks() if t.answer["outputs"] and not has_write(t))
    env = spec.new_episode()
    await env.reset(task, 0)

    async def read(name: str, **args: str) -> dict:
        result = await env.step(Action(tool_calls=[ToolCall(name, args)]))
        return json.loads(result.observation.tool_results[0].content)

    calls = [ToolCall("get_user_details", {"user_id": task.metadata["user_id"]})]
    records = [await read("get_user_details", user_id=task.metadata["user_id"])]
    for order_id in records[0]["orders"]:
        calls.append(ToolCall("get_order_details", {"order_id": order_id}))
        order = await read("get_order_details", order_id=order_id)
        records.append(order)
        for item in order["items"]:
            calls.append(ToolCall("get_product_details", {"product_id": item["product_id"]}))
            records.append(await read("get_product_details", product_id=item["product_id"]))
    lines = [f"{k} = {v}" for r in records for k, v in r.items()]
    dump = (
        "Here is everything I found: " + "; ".join(lines) + " " + " ".join(task.answer["outputs"])
    )
    actions = [
        Action(text="May I have your user id?"),
        *(Action(tool_calls=[c]) for c in calls),
        Action(text=dump),
    ]
    tau, strict = await both(TauRetail, task, actions)
    assert tau == 1.0 and strict["own_words"] == 1.0  # not verbatim: own_words is blind to it
    assert strict["stated_outputs"] == 0.0 and strict["total"] == 0.0


async def test_a_refusal_without_looking_anything_up_trips_grounded() -> None:
    spec = TauAirline()
    task = first(spec, lambda t: not t.answer["gold_diff"] and not t.answer["outputs"])
    actions = [Action(text="Sorry, I cannot do that.")]
    tau, strict = await both(TauAirline, task, actions)
    assert tau == 1.0 and strict["grounded"] == 0.0 and strict["total"] == 0.0


async def test_a_change_outside_the_tasks_records_trips_no_collateral() -> None:
    spec = TauRetail()
    task = first(spec, has_write)
    other = next(u for u in load_json("retail", "db/users.json") if u != task.metadata["user_id"])
    address = {"address1": "1 Elm St", "address2": "", "city": "Austin", "country": "USA"}
    extra = ToolCall(
        "modify_user_address", {"user_id": other, **address, "state": "TX", "zip": "78701"}
    )
    script = oracle_script(spec, task)
    actions = [*script[:-1], Action(text="Shall I proceed (yes/no)?"), Action(tool_calls=[extra])]
    _, strict = await both(TauRetail, task, [*actions, script[-1]])
    assert strict["no_collateral"] == 0.0 and strict["total"] == 0.0
    assert strict["identity_established"] == 0.0  # and that user was never identified


async def test_the_gold_state_reached_by_other_writes_trips_required_writes() -> None:
    """The gate compares the writes themselves: the final records alone do not show that the
    task's write was the one made (here the record is written whole by another tool)."""
    from envlab.core import GradingContext
    from envlab.envs.tau.strict import required_writes

    spec = TauRetail()
    task = first(spec, has_write)
    gold = next(a for a in task.answer["actions"] if a["name"] in task.metadata["write_tools"])
    state = {"changes": task.answer["gold_diff"], "events": []}
    assert required_writes(GradingContext(task, None, state)) == 0.0
    done = {"by": "tool", "name": gold["name"], "arguments": dict(gold["kwargs"]), "result": "{}"}
    state["events"] = [{**done, "writes": True, "error": False}]
    assert required_writes(GradingContext(task, None, state)) == 1.0
    state["events"] = [
        {**done, "arguments": {**gold["kwargs"], "order_id": "#W0"}, "writes": True, "error": False}
    ]
    assert required_writes(GradingContext(task, None, state)) == 0.0


@pytest.mark.parametrize(("cls", "passes"), [(TauAirline, 20)])  # retail: 11/115, in the note
async def test_a_spam_agent_passes_only_no_change_tasks_under_tau_and_nothing_strict(
    cls: type[TauSpec], passes: int
) -> None:
    """vet's spam probe (every read tool on every id, everything read repeated to the user)
    passes the tasks whose right outcome changes nothing and whose outputs are in what it read
    (the published ~40% airline, ~10% retail); ``own_words`` stops it under ``strict``."""
    from envlab.vet.spam import SpamAgent, spam_budget

    spec = cls()
    task = spec.tasks()[0]
    agent = AgentClass(SpamAgent, spam_budget(spec.limits(task)))
    tau = await run_all(spec, "test", agent)
    noop = await run_all(spec, "test", AgentClass(NoopAgent))
    no_change = {t.id for t in spec.tasks() if not t.answer["gold_diff"]}
    passed = {k for k, r in tau.items() if r == 1.0}
    assert {k for k, r in noop.items() if r == 1.0} <= passed <= no_change
    assert len(passed) == passes
    strict = await run_all(cls(reward="strict"), "test", agent)
    assert not any(r for r in strict.values())
