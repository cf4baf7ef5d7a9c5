"""τ-bench's retail tools on envlab's Database: the gold actions of every task replay exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from envlab.envs.tau.db import Database, Record, load_json
from envlab.envs.tau.retail import RETAIL_SCHEMA, RetailTools

SPLITS = {"test": 115, "train": 500, "dev": 20}
WRITE_TOOLS = {
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
}


def fresh() -> RetailTools:
    tools = RetailTools()
    tools.db = Database("retail", RETAIL_SCHEMA)
    return tools


def unchanged(tools: RetailTools, name: str, kwargs: dict[str, Any]) -> str:
    """Call a tool that must change nothing; return what the agent reads."""
    before = tools.db.conn.total_changes, tools.db.writes
    out = tools.call(name, kwargs)
    assert (tools.db.conn.total_changes, tools.db.writes) == before, f"{name} wrote"
    assert tools.db.changes() == {}
    return out


def orders(tools: RetailTools, status: str) -> Iterator[Record]:
    return (order for _, order in tools.db.items("orders") if order["status"] == status)


def _by_equality(tools: RetailTools, pristine: Database) -> dict[str, dict[str, Record | None]]:
    """The changes as the shipped ``gold_diff`` was made: records unequal by Python's ``==``
    (which misses a value that changed only its type, as 9 -> 9.0)."""
    out: dict[str, dict[str, Record | None]] = {}
    for table, records in tools.db.changes().items():
        for key, record in records.items():
            if record != pristine.get(table, key):
                out.setdefault(table, {})[key] = record
    return out


@pytest.mark.parametrize("split", SPLITS)
def test_gold_actions_replay_exactly(split: str) -> None:
    tasks = load_json("retail", f"tasks_{split}.json")
    assert len(tasks) == SPLITS[split]
    pristine = fresh().db
    failed = []
    for i, task in enumerate(tasks):
        tools = fresh()
        results = []
        for action in task["actions"]:
            before = tools.db.conn.total_changes
            results.append(tools.call(action["name"], action["kwargs"]))
            if not tools.tool_specs[action["name"]].writes:  # a read tool never writes
                assert tools.db.conn.total_changes == before, (split, i, action["name"])
        if (
            results != task["gold_tool_results"]
            or _by_equality(tools, pristine) != task["gold_diff"]
        ):
            failed.append(i)
    assert failed == [], f"{len(failed)} of {len(tasks)} {split} tasks differ: {failed[:20]}"


def test_schemas_equal_tools_json() -> None:
    published = load_json("retail", "tools.json")
    derived = {name: spec.openai for name, spec in RetailTools.tool_specs.items()}
    assert list(derived) == [t["function"]["name"] for t in published]
    for entry in published:
        assert derived[entry["function"]["name"]] == entry


def test_the_write_tools_are_marked() -> None:
    writes = {name for name, spec in RetailTools.tool_specs.items() if spec.writes}
    assert writes == WRITE_TOOLS
    assert len(RetailTools.tool_specs) == 16


def test_cancelling_a_delivered_order_is_refused_and_changes_nothing() -> None:
    tools = fresh()
    order = next(orders(tools, "delivered"))
    out = unchanged(
        tools, "cancel_pending_order", {"order_id": order["order_id"], "reason": "no longer needed"}
    )
    assert out == "Error: non-pending order cannot be cancelled"


def test_a_reason_outside_the_enum_gets_tau_bench_answer_not_a_schema_error() -> None:
    tools = fresh()
    order = next(orders(tools, "pending"))
    out = unchanged(
        tools, "cancel_pending_order", {"order_id": order["order_id"], "reason": "changed my mind"}
    )
    assert out == "Error: invalid reason"


def test_a_refund_to_a_third_payment_method_is_refused() -> None:
    tools = fresh()
    for order in orders(tools, "delivered"):
        user = tools.db.get("users", order["user_id"])
        assert user is not None
        original = order["payment_history"][0]["payment_method_id"]
        other = [m for m in user["payment_methods"] if m != original and "gift_card" not in m]
        if other:
            break
    kwargs = {"order_id": order["order_id"], "item_ids": [order["items"][0]["item_id"]]}
    out = unchanged(
        tools, "return_delivered_order_items", {**kwargs, "payment_method_id": other[0]}
    )
    assert (
        out == "Error: payment method should be either the original payment method or a gift card"
    )
    out = unchanged(
        tools, "return_delivered_order_items", {**kwargs, "payment_method_id": "credit_card_0"}
    )
    assert out == "Error: payment method not found"


def test_paying_with_the_same_method_or_a_short_gift_card_is_refused() -> None:
    tools = fresh()
    order = next(orders(tools, "pending"))
    current = order["payment_history"][0]["payment_method_id"]
    out = unchanged(
        tools,
        "modify_pending_order_payment",
        {"order_id": order["order_id"], "payment_method_id": current},
    )
    assert out == "Error: the new payment method should be different from the current one"
    for order in orders(tools, "pending"):
        user = tools.db.get("users", order["user_id"])
        assert user is not None
        short = [
            k
            for k, m in user["payment_methods"].items()
            if m["source"] == "gift_card"
            and m["balance"] < order["payment_history"][0]["amount"]
            and k != order["payment_history"][0]["payment_method_id"]
        ]
        if short:
            break
    out = unchanged(
        tools,
        "modify_pending_order_payment",
        {"order_id": order["order_id"], "payment_method_id": short[0]},
    )
    assert out == "Error: insufficient gift card balance to pay for the order"


def test_an_item_of_another_product_is_refused_and_a_second_change_too() -> None:
    tools = fresh()

    def available(item: Record) -> bool:
        product = tools.db.get("products", item["product_id"])
        return product is not None and product["variants"][item["item_id"]]["available"]

    order = next(
        o
        for o in orders(tools, "pending")
        if len({i["product_id"] for i in o["items"][:2]}) == 2 and available(o["items"][0])
    )
    first, second = order["items"][0], order["items"][1]
    foreign = second["item_id"]  # a variant of another product
    kwargs = {
        "order_id": order["order_id"],
        "item_ids": [first["item_id"]],
        "payment_method_id": order["payment_history"][0]["payment_method_id"],
    }
    out = unchanged(tools, "modify_pending_order_items", {**kwargs, "new_item_ids": [foreign]})
    assert out == f"Error: new item {foreign} not found or available"
    out = unchanged(tools, "modify_pending_order_items", {**kwargs, "new_item_ids": []})
    assert out == "Error: the number of items to be exchanged should match"
    # a valid change (the same item), then any other change of that order is refused
    done = tools.call("modify_pending_order_items", {**kwargs, "new_item_ids": [first["item_id"]]})
    assert json.loads(done)["status"] == "pending (item modified)"
    writes = tools.db.conn.total_changes
    again = tools.call(
        "modify_pending_order_address",
        {
            "order_id": order["order_id"],
            "address1": "1 Main St",
            "address2": "",
            "city": "Austin",
            "state": "TX",
            "country": "USA",
            "zip": "78701",
        },
    )
    assert again == "Error: non-pending order cannot be modified"
    assert tools.db.conn.total_changes == writes


def test_users_are_found_by_email_in_any_case_and_by_name_and_zip_through_indexes() -> None:
    tools = fresh()
    user_id, user = next(tools.db.items("users"))
    assert unchanged(tools, "find_user_id_by_email", {"email": user["email"].upper()}) == user_id
    name, zip_code = user["name"], user["address"]["zip"]
    found = unchanged(
        tools,
        "find_user_id_by_name_zip",
        {"first_name": name["first_name"].lower(), "last_name": name["last_name"], "zip": zip_code},
    )
    assert found == user_id
    assert unchanged(tools, "find_user_id_by_email", {"email": "no@one"}) == "Error: user not found"
    # τ-bench lowercases both sides; the indexed lookup lowercases the query only, which is the
    # same test because every stored email is lowercase
    assert all(u["email"] == u["email"].lower() for _, u in tools.db.items("users"))
    for field in ("email", "address.zip"):
        column = "by_" + field.replace(".", "_")
        plan = tools.db.conn.execute(
            f'EXPLAIN QUERY PLAN SELECT id FROM users WHERE "{column}" = ?', ("x",)
        ).fetchall()
        assert f"users_{field}" in str(plan)


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("2 + 2", "4.0"),
        ("(100 - 33.333) / 3", "22.22"),
        (" 3 * 3", "9.0"),
        ("1 / 0", "Error: division by zero"),
        ("2 ** 10", "1024.0"),
        ("2 ** 2000", "Error: int too large to convert to float"),
        ("9 ** 9 ** 9", "Error: int too large to convert to float"),  # refused at once
        ("import os", "Error: invalid characters in expression"),
        ("(2)(3)", "Error: 'int' object is not callable"),
    ],
)
@pytest.mark.filterwarnings("ignore:'int' object is not callable:SyntaxWarning")
def test_calculate_answers_as_tau_bench(expression: str, answer: str) -> None:
    assert unchanged(fresh(), "calculate", {"expression": expression}) == answer


def test_think_and_transfer_answer_as_tau_bench() -> None:
    tools = fresh()
    assert unchanged(tools, "think", {"thought": "..."}) == ""
    assert unchanged(tools, "transfer_to_human_agents", {"summary": "s"}) == "Transfer successful"
    listed = json.loads(unchanged(tools, "list_all_product_types", {}))
    assert len(listed) == 50 and list(listed) == sorted(listed)
