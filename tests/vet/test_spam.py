"""The spam probe of ``envlab vet``: an agent that calls every read tool on every id it finds
and repeats everything it read to the user. Real episodes through ``vet_environment`` on a
small shop whose lax grader a dump passes, and whose correct grader it does not."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from envlab.core import (
    Action,
    Component,
    EnvSpec,
    GradingContext,
    Limits,
    Observation,
    Rubric,
    StepResult,
    Task,
    TaskSet,
    ToolCall,
    ToolCallError,
    ToolEnv,
    tool,
)
from envlab.envs import load_env
from envlab.runs import TrajectoryStore
from envlab.vet.model import EnvVet
from envlab.vet.runner import VetConfig, vet_environment
from envlab.vet.spam import find_ids, read_tool
from tests.conftest import subprocess_env

USERS = {
    "ana_ko_1234": {"email": "ana.ko@example.com", "orders": ["#A1001", "#A1002"]},
    "bo_li_5678": {"email": "bo.li@example.com", "orders": ["#A2001"]},
}
ORDERS = {
    "#A1001": {"user_id": "ana_ko_1234", "item": "8412345678", "price": 19.99, "status": "open"},
    "#A1002": {"user_id": "ana_ko_1234", "item": "8499999999", "price": 42.17, "status": "open"},
    "#A2001": {"user_id": "bo_li_5678", "item": "8412345678", "price": 7.5, "status": "open"},
}
TASKS = [  # prompt, outputs the agent must say, orders it must cancel
    ("What did I pay for order #A1002? I am ana_ko_1234.", ["42.17"], []),
    ("How much was my most recent order?", ["42.17"], []),
    ("Please cancel order #A2001 for me.", [], ["#A2001"]),
    ("I would like to cancel an order, but not today.", [], []),
]


def _said(ctx: GradingContext) -> str:
    return " ".join(ctx.state["said"])


def _outputs_said(ctx: GradingContext) -> float:
    """Lax, as τ-bench's output check: each required string somewhere in what the agent said."""
    said = _said(ctx).lower()
    return float(all(o.lower() in said for o in ctx.task.answer["outputs"]))


def _db_as_expected(ctx: GradingContext) -> float:
    cancelled = {k for k, v in ctx.state["orders"].items() if v["status"] == "cancelled"}
    return float(cancelled == set(ctx.task.answer["cancel"]))


def _one_answer(ctx: GradingContext) -> float:
    """Correct: the prices the agent stated are exactly the ones asked for."""
    stated = re.findall(r"\d+\.\d\d", _said(ctx))
    return float(sorted(set(stated)) == sorted(ctx.task.answer["outputs"]))


# as τ-bench's reward: the outputs said, and nothing unless the database is as expected
LAX = Rubric([Component("db", _db_as_expected, gate=True), Component("outputs", _outputs_said)])
CORRECT = Rubric(
    [
        Component("db", _db_as_expected, gate=True),
        Component("outputs", _outputs_said),
        Component("one_answer", _one_answer, gate=True),
    ]
)


class ShopEpisode(ToolEnv):
    """A customer asks about their orders; the first text the agent sends is its answer."""

    rubric: ClassVar[Rubric] = LAX

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.orders = copy.deepcopy(ORDERS)
        self.said: list[str] = []

    async def step(self, action: Action) -> StepResult:
        if not action.tool_calls:
            self.said.append(action.text)
        return await super().step(action)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "orders": copy.deepcopy(self.orders), "said": list(self.said)}

    def oracle_actions(self, task: Task) -> list[Action]:
        cancels = [
            Action(tool_calls=[ToolCall("cancel_order", {"order_id": o}, id=f"o{i}")])
            for i, o in enumerate(task.answer["cancel"])
        ]
        return [*cancels, Action(text=" ".join(task.answer["outputs"]) or "Done.")]

    @tool
    def get_user(self, user_id: str) -> str:
        """The user's record.

        Args:
            user_id: The user's id, e.g. ana_ko_1234.
        """
        if user_id not in USERS:
            raise ToolCallError("user not found")
        return json.dumps(USERS[user_id])

    @tool
    def get_order(self, order_id: str) -> str:
        """An order's record.

        Args:
            order_id: The order's id, with its '#'.
        """
        if order_id not in self.orders:
            raise ToolCallError("order not found")
        return json.dumps(self.orders[order_id])

    @tool
    def find_user_by_email(self, email: str) -> str:
        """The id of the user with this email.

        Args:
            email: The email.
        """
        for uid, u in USERS.items():
            if u["email"] == email:
                return uid
        raise ToolCallError("no user with this email")

    @tool(writes=True)
    def cancel_order(self, order_id: str) -> str:
        """Cancel an open order.

        Args:
            order_id: The order's id.
        """
        self.get_order(order_id)
        self.orders[order_id]["status"] = "cancelled"
        return json.dumps(self.orders[order_id])

    @tool
    def think(self, thought: str) -> str:
        """Think out loud.

        Args:
            thought: A thought.
        """
        return ""

    @tool
    def add(self, a: float, b: float) -> str:
        """Add two numbers.

        Args:
            a: A number.
            b: Another number.
        """
        return str(a + b)


class ChatShopEpisode(ShopEpisode):
    """The same shop as a conversation: a text goes to the customer, who gives their user id
    only when asked for it and leaves after three messages."""

    async def step(self, action: Action) -> StepResult:
        if action.tool_calls:
            return await super().step(action)
        self.n_steps += 1
        self.said.append(action.text)
        self.done = len(self.said) >= 3
        reply = "My user id is ana_ko_1234." if "user id" in action.text.lower() else "Thanks."
        return StepResult(Observation(text=reply), 0.0, done=self.done)


class LaxShop(EnvSpec):
    id = "lax-shop"
    environment = ShopEpisode
    default_limits = Limits(max_steps=20)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = [
            Task(id=f"shop-{i}", prompt=p, answer={"outputs": out, "cancel": cancel})
            for i, (p, out, cancel) in enumerate(TASKS)
        ]
        return TaskSet(tasks[:n], seed=seed, name=self.name)


class CorrectEpisode(ShopEpisode):
    rubric = CORRECT


class CorrectShop(LaxShop):
    id = "correct-shop"
    environment = CorrectEpisode


class ChatEpisode(ChatShopEpisode):
    pass


class ChatShop(LaxShop):
    id = "chat-shop"
    environment = ChatEpisode


async def vet(spec: EnvSpec, tmp_path: Path, **kw: Any) -> EnvVet:
    cfg = VetConfig(oracle_runs=1, **kw)
    return await vet_environment(spec, out_dir=tmp_path / "vet", config=cfg)


def check(report: EnvVet, task_id: str, name: str) -> Any:
    task = next(t for t in report.tasks if t.task_id == task_id)
    return next(c for c in task.checks if c.name == name)


def spam_episodes(tmp_path: Path) -> list[Any]:
    store = TrajectoryStore(tmp_path / "vet" / "trajectories.jsonl")
    return [t for t in store.load() if t.info.get("probe") == "spam"]


def test_ids_are_found_in_text_and_records() -> None:
    text = json.dumps(
        {
            "user_id": "mia_li_3668",
            "orders": ["#W2378156"],
            "flights": [{"flight_number": "HAT136", "date": "2024-05-15"}],
            "reservations": ["4WQ150", "JMO1MG"],
            "item_id": "9523456873",
            "email": "mia.li3668@example.com",
            "created_at": "2024-05-06T11:21:32",
            "zip": "98187",
            "price": 829.43,
            "origin": "JFK",
        }
    )
    assert find_ids(text) == [
        "mia_li_3668", "#W2378156", "HAT136", "4WQ150", "JMO1MG", "9523456873",
        "mia.li3668@example.com",
    ]  # fmt: skip
    assert find_ids("my reservation is JMO1MG, mail me at a.b@c.org.") == ["JMO1MG", "a.b@c.org"]


def test_only_read_tools_it_can_fill_are_called() -> None:
    specs = ShopEpisode._tool_specs
    fillable = {n: read_tool(s) for n, s in specs.items()}
    assert {n for n, r in fillable.items() if r is not None} == {
        "get_user", "get_order", "find_user_by_email",
    }  # fmt: skip
    assert fillable["get_order"].param == "order_id"
    assert fillable["find_user_by_email"].email_only
    # the write tool, a prose argument (think), two numbers (add): skipped
    assert fillable["cancel_order"] is None and fillable["think"] is None
    assert fillable["add"] is None


async def test_spam_passes_a_lax_grader_and_the_report_says_so(tmp_path: Path) -> None:
    report = await vet(LaxShop(), tmp_path)
    spam = check(report, "shop-0", "spam")
    assert spam.status == "fail" and spam.verdict == "trivial", spam.summary
    assert spam.evidence["passed"] == ["spam"]
    outcome = spam.evidence["episodes"]["spam"][0]
    assert outcome["passed"] and outcome["satisfied"] == ["db", "outputs"]
    assert "satisfied: db, outputs" in spam.summary
    assert check(report, "shop-0", "noop").status == "pass"  # only the dump passes it
    # a task that needs a write is not passed by reading; one that needs nothing is passed by both
    assert check(report, "shop-2", "spam").status == "pass"
    noop = check(report, "shop-3", "noop")
    assert noop.status == "fail" and noop.evidence["passed"] == ["noop"]
    assert noop.evidence["episodes"]["noop"][0]["satisfied"] == ["db", "outputs"]
    baselines = next(c for c in report.env_checks if c.name == "baseline_passes")
    assert baselines.status == "fail"
    assert baselines.evidence["passed"] == {"noop": ["shop-3"], "spam": ["shop-0", "shop-3"]}
    assert baselines.evidence["by_task"]["shop-0"]["spam"]["satisfied"] == ["db", "outputs"]
    verdicts = {t.task_id: t.verdict for t in report.tasks}
    assert verdicts["shop-0"] == verdicts["shop-3"] == "trivial"
    assert verdicts["shop-2"] == "ok"


async def test_spam_reads_only_and_one_call_a_step(tmp_path: Path) -> None:
    await vet(LaxShop(), tmp_path)
    episodes = spam_episodes(tmp_path)
    assert len(episodes) == len(TASKS)
    called: set[str] = set()
    for t in episodes:
        assert t.agent.name == "spam" and t.agent.harness == "vet:spam"
        assert not t.agent.privileged
        for m in t.messages:
            calls = m.get("tool_calls") or []
            assert len(calls) <= 1
            called |= {c["function"]["name"] for c in calls}
    assert called <= {"get_user", "get_order", "find_user_by_email"}
    assert "get_order" in called and "get_user" in called
    shop0 = next(t for t in episodes if t.task_id == "shop-0")
    dump = shop0.messages[-1]["content"]
    assert "42.17" in dump and "19.99" in dump  # every order it read, repeated


async def test_a_correct_grader_is_not_fooled(tmp_path: Path) -> None:
    report = await vet(CorrectShop(), tmp_path)
    spam = check(report, "shop-0", "spam")
    assert spam.status == "pass", spam.summary
    outcome = spam.evidence["episodes"]["spam"][0]
    assert outcome["reward"] == 0.0 and outcome["gated_by"] == "one_answer"
    assert outcome["satisfied"] == ["db", "outputs"]  # what it got, although gated
    assert check(report, "shop-0", "oracle").status == "pass"
    baselines = next(c for c in report.env_checks if c.name == "baseline_passes")
    assert baselines.evidence["passed"]["spam"] == ["shop-3"]  # doing nothing is right there


async def test_ids_the_user_gives_later_are_read_in_the_next_round(tmp_path: Path) -> None:
    report = await vet(ChatShop(), tmp_path, tasks=2)
    spam = check(report, "shop-1", "spam")  # no id in the prompt: asked for, then read
    assert spam.status == "fail", spam.summary
    assert spam.evidence["messages_to_user"] >= 2
    for t in spam_episodes(tmp_path):
        assert t.n_steps <= 20 - 1  # within its budget, under the env's max_steps
        said = [
            m["content"] for m in t.messages if m["role"] == "assistant" and not m.get("tool_calls")
        ]
        assert "user id" in said[0]


async def test_the_budget_stays_under_max_steps(tmp_path: Path) -> None:
    class Tight(ChatShop):
        id = "tight-shop"
        default_limits = Limits(max_steps=6)

    report = await vet(Tight(), tmp_path, tasks=2)
    for t in spam_episodes(tmp_path):
        assert t.agent.limits["max_steps"] == 5
        acted = [m for m in t.messages if m["role"] == "assistant"][:5]
        assert any(not m.get("tool_calls") for m in acted)  # it spoke to the user in budget
    assert check(report, "shop-0", "spam").status in ("pass", "fail")


@pytest.mark.parametrize("name", ["arith", "calc"])
async def test_no_spam_probe_without_fillable_read_tools(name: str, tmp_path: Path) -> None:
    report = await vet(load_env(name), tmp_path, tasks=3)
    assert all(check(report, t.task_id, "spam").status == "n/a" for t in report.tasks)
    assert not spam_episodes(tmp_path)
    assert report.verdict_counts["ok"] == 3


def test_the_cli_lists_the_tasks_a_baseline_passes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "envlab.cli.main", "vet", "tests.vet.test_spam:LaxShop"]
    args = ["--agent", "none", "--oracle-runs", "1", "--out", str(tmp_path)]
    r = subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=subprocess_env(), timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "tasks passed by an agent that does no work" in r.stdout
    assert re.search(r"shop-0: spam 1 \(db, outputs\)", r.stdout), r.stdout
    assert re.search(r"shop-3: noop 1 \(db, outputs\); spam 1", r.stdout), r.stdout
    data = json.loads((tmp_path / "vet.json").read_text())
    env = next(c for c in data["env_checks"] if c["name"] == "baseline_passes")
    assert env["evidence"]["counts"] == {"noop": 1, "spam": 2}
