"""τ-bench's airline tools on envlab's SQLite database: the gold actions of every task replay to
τ-bench's results and database, the schemas are tools.json's, refusals change nothing."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from envlab.envs.tau.airline import AIRLINE_SCHEMA, AirlineTools
from envlab.envs.tau.db import Database, load_json

WRITE_TOOLS = {
    "book_reservation",
    "cancel_reservation",
    "send_certificate",
    "update_reservation_baggages",
    "update_reservation_flights",
    "update_reservation_passengers",
}


def _splits() -> list[str]:
    root = resources.files("envlab.envs.tau") / "data" / "airline"
    names = [p.name.split(".")[0] for p in root.iterdir() if p.name.startswith("tasks_")]
    return sorted(n.removeprefix("tasks_") for n in names)


def _tasks() -> list[Any]:
    return [
        pytest.param(split, task, id=f"{split}-{task['index']}")
        for split in _splits()
        for task in load_json("airline", f"tasks_{split}.json")
    ]


def _fresh() -> AirlineTools:
    tools = AirlineTools()
    tools.db = Database("airline", AIRLINE_SCHEMA)
    return tools


@pytest.fixture
def tools() -> AirlineTools:
    return _fresh()


def test_the_data_has_the_published_split() -> None:
    assert _splits() == ["test"]
    assert len(load_json("airline", "tasks_test.json")) == 50


@pytest.mark.parametrize(("split", "task"), _tasks())
def test_gold_actions_replay_to_taus_results_and_database(split: str, task: dict) -> None:
    tools = _fresh()
    for action, expected in zip(task["actions"], task["gold_tool_results"], strict=True):
        before = tools.db.conn.total_changes
        got = tools.call(action["name"], action["kwargs"])
        assert got == expected, f"{action['name']} returned what τ-bench's tool does not"
        if not tools.tool_specs[action["name"]].writes:
            assert tools.db.conn.total_changes == before, f"read tool {action['name']} wrote"
    assert tools.db.changes() == task["gold_diff"]


def test_derived_schemas_equal_tools_json() -> None:
    published = {t["function"]["name"]: t for t in load_json("airline", "tools.json")}
    derived = {name: spec.openai for name, spec in AirlineTools.tool_specs.items()}
    assert sorted(derived) == sorted(published)
    for name, schema in published.items():
        assert derived[name] == schema, name


def test_exactly_the_tools_that_change_the_database_are_marked_writes() -> None:
    marked = {name for name, spec in AirlineTools.tool_specs.items() if spec.writes}
    assert marked == WRITE_TOOLS


# -- refusals: τ-bench's texts, nothing changed ------------------------------------------------


def _refused(tools: AirlineTools, name: str, kwargs: dict[str, Any], text: str) -> None:
    before = tools.db.conn.total_changes
    assert tools.call(name, kwargs) == f"Error: {text}"
    assert tools.db.conn.total_changes == before
    assert tools.db.changes() == {}


def _booking(**change: Any) -> dict[str, Any]:
    """mia_li_3668's booking of task 0 (JFK-ATL-SEA, economy, 255 in all), with changes."""
    kwargs = load_json("airline", "tasks_test.json")[0]["actions"][0]["kwargs"]
    return {**kwargs, **change}


def test_booking_with_a_payment_method_the_user_lacks_is_refused(tools: AirlineTools) -> None:
    payments = [{"payment_id": "credit_card_9999999", "amount": 255}]
    _refused(
        tools,
        "book_reservation",
        _booking(payment_methods=payments),
        "payment method credit_card_9999999 not found",
    )


def test_booking_refusals_in_taus_order(tools: AirlineTools) -> None:
    _refused(tools, "book_reservation", _booking(user_id="nobody_1"), "user not found")
    card = [{"payment_id": "credit_card_4421486", "amount": 250}]
    _refused(
        tools,
        "book_reservation",
        _booking(payment_methods=card),
        "payment amount does not add up, total price is 255, but paid 250",
    )
    too_much = [{"payment_id": "certificate_7504069", "amount": 255}]
    _refused(
        tools,
        "book_reservation",
        _booking(payment_methods=too_much),
        "not enough balance in payment method certificate_7504069",
    )
    landed = [{"flight_number": "HAT001", "date": "2024-05-01"}]
    _refused(
        tools,
        "book_reservation",
        _booking(flights=landed),
        "flight HAT001 not available on date 2024-05-01",
    )
    unknown = [{"flight_number": "HAT999", "date": "2024-05-20"}]
    _refused(tools, "book_reservation", _booking(flights=unknown), "flight HAT999 not found")


def _holder(
    tools: AirlineTools, source: str, most: float = float("inf")
) -> tuple[str, dict, str, dict]:
    """The first reservation whose owner holds a ``source`` method with an amount under
    ``most``: (reservation id, reservation, payment id, method)."""
    for rid, reservation in tools.db.items("reservations"):
        user = tools.db.get("users", reservation["user_id"])
        assert user is not None
        for pid, method in user["payment_methods"].items():
            if method["source"] == source and method.get("amount", 0) < most:
                return rid, reservation, pid, method
    raise AssertionError(f"the data has no reservation whose owner holds a {source}")


def test_changes_to_a_reservation_are_refused_with_taus_texts(tools: AirlineTools) -> None:
    _refused(tools, "cancel_reservation", {"reservation_id": "NOSUCH"}, "reservation not found")
    _refused(tools, "get_reservation_details", {"reservation_id": "NOSUCH"}, "user not found")
    rid, reservation, certificate, _ = _holder(tools, "certificate")
    flights = [
        {"flight_number": f["flight_number"], "date": f["date"]} for f in reservation["flights"]
    ]
    _refused(
        tools,
        "update_reservation_flights",
        {"reservation_id": rid, "cabin": reservation["cabin"], "flights": flights,
         "payment_id": certificate},
        "certificate cannot be used to update reservation",
    )  # fmt: skip
    _refused(
        tools,
        "update_reservation_baggages",
        {"reservation_id": rid, "total_baggages": 9, "nonfree_baggages": 4,
         "payment_id": "credit_card_0000000"},
        "payment method not found",
    )  # fmt: skip
    twice = [*reservation["passengers"], *reservation["passengers"]]
    _refused(
        tools,
        "update_reservation_passengers",
        {"reservation_id": rid, "passengers": twice},
        "number of passengers does not match",
    )


def test_a_gift_card_short_of_the_price_is_refused(tools: AirlineTools) -> None:
    rid, reservation, card, _ = _holder(tools, "gift_card", most=500)
    kwargs = {
        "reservation_id": rid,
        "total_baggages": reservation["total_baggages"] + 10,
        "nonfree_baggages": reservation["nonfree_baggages"] + 10,
        "payment_id": card,
    }
    _refused(tools, "update_reservation_baggages", kwargs, "gift card balance is not enough")


def test_cancelling_checks_nothing_but_the_id_as_in_tau(tools: AirlineTools) -> None:
    # τ-bench's tool cancels a reservation whose first segment has flown: only the policy
    # forbids it (the strict reward's gates judge that, not the tool).
    flown = next(
        rid
        for rid, r in tools.db.items("reservations")
        if r.get("status") != "cancelled"
        and _status(tools, r["flights"][0]) in ("landed", "flying")
    )
    out = json.loads(tools.call("cancel_reservation", {"reservation_id": flown}))
    assert out["status"] == "cancelled"
    assert tools.db.changes() == {"reservations": {flown: out}}


def _status(tools: AirlineTools, segment: dict) -> str:
    flight = tools.db.get("flights", segment["flight_number"])
    assert flight is not None
    return flight["dates"][segment["date"]]["status"]


# -- what τ-bench makes: ids, records as sent, numbers as sent --------------------------------


def test_new_reservations_take_taus_three_ids_then_overwrite_the_last(tools: AirlineTools) -> None:
    ids = []
    for _ in range(4):
        tools.call("send_certificate", {"user_id": "mia_li_3668", "amount": 1000})
        kwargs = _booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 255}])
        ids.append(json.loads(tools.call("book_reservation", kwargs))["reservation_id"])
    assert ids == ["HATHAT", "HATHAU", "HATHAV", "HATHAV"]
    user = tools.db.get("users", "mia_li_3668")
    assert user is not None
    assert user["reservations"][-4:] == ids


def test_certificates_take_taus_three_ids_then_answer_none(tools: AirlineTools) -> None:
    answers = [tools.call("send_certificate", {"user_id": "mia_li_3668", "amount": a})
               for a in (100, 2.5, 7, 8)]  # fmt: skip
    assert answers == [
        "Certificate certificate_3221322 added to user mia_li_3668 with amount 100.",
        "Certificate certificate_3221323 added to user mia_li_3668 with amount 2.5.",
        "Certificate certificate_3221324 added to user mia_li_3668 with amount 7.",
        "None",
    ]
    methods = tools.db.changes()["users"]["mia_li_3668"]["payment_methods"]
    assert methods["certificate_3221322"] == {
        "source": "certificate",
        "amount": 100,
        "id": "certificate_3221322",
    }


def test_items_are_stored_as_the_agent_sent_them(tools: AirlineTools) -> None:
    kwargs = _booking(
        flights=[
            {"date": "2024-05-20", "flight_number": "HAT136"},
            {"flight_number": "HAT039", "date": "2024-05-20", "seat": "12A"},
        ],
        passengers=[{"dob": "1990-04-05", "first_name": "Mia", "last_name": "Li", "x": [1]}],
        payment_methods=[{"amount": 255, "payment_id": "credit_card_4421486"}],
    )
    text = tools.call("book_reservation", kwargs)
    made = json.loads(text)
    assert list(made["flights"][0]) == ["date", "flight_number", "price", "origin", "destination"]
    assert made["flights"][1]["seat"] == "12A"
    assert made["passengers"] == kwargs["passengers"]
    assert '"payment_history": [{"amount": 255, "payment_id": "credit_card_4421486"}]' in text


def test_a_nested_item_missing_a_field_or_of_the_wrong_type_is_refused(
    tools: AirlineTools,
) -> None:
    """As τ-bench's book_reservation.py refuses them: a missing key is its KeyError, a string
    amount fails its sum of the amounts (int + str)."""
    flights = [{"flight_number": "HAT136"}]
    assert tools.call("book_reservation", _booking(flights=flights)) == "Error: 'date'"
    payments = [{"payment_id": "credit_card_4421486", "amount": "255"}]
    assert tools.call("book_reservation", _booking(payment_methods=payments)) == (
        "Error: unsupported operand type(s) for +: 'int' and 'str'"
    )
    assert tools.db.changes() == {}


def test_gift_card_and_price_arithmetic_as_in_tau(tools: AirlineTools) -> None:
    rid, reservation, card, method = _holder(tools, "gift_card")
    kwargs = {
        "reservation_id": rid,
        "total_baggages": reservation["total_baggages"] + 2,
        "nonfree_baggages": reservation["nonfree_baggages"] + 2,
        "payment_id": card,
    }
    out = json.loads(tools.call("update_reservation_baggages", kwargs))
    assert out["payment_history"][-1] == {"payment_id": card, "amount": 100}
    changed = tools.db.changes()["users"][reservation["user_id"]]["payment_methods"][card]
    assert changed["amount"] == method["amount"] - 100


# -- searches against τ-bench's loops over the plain data --------------------------------------


def _reference_direct(flights: dict, origin: str, destination: str, date: str) -> list:
    out = []
    for f in flights.values():
        if f["origin"] == origin and f["destination"] == destination:
            day = f["dates"].get(date)
            if day is not None and day["status"] == "available":
                row = {k: v for k, v in f.items() if k != "dates"}
                row.update(day)
                out.append(row)
    return out


def _reference_onestop(flights: dict, origin: str, destination: str, date: str) -> list:
    out = []
    for a in flights.values():
        if a["origin"] != origin:
            continue
        for b in flights.values():
            if b["destination"] != destination or a["destination"] != b["origin"]:
                continue
            late = "+1" in a["scheduled_arrival_time_est"]
            day2 = "2024-05-" + str(int(date[-2:]) + 1) if late else date
            if a["scheduled_arrival_time_est"] > b["scheduled_departure_time_est"]:
                continue
            if date not in a["dates"] or day2 not in b["dates"]:
                continue
            if a["dates"][date]["status"] != "available":
                continue
            if b["dates"][day2]["status"] != "available":
                continue
            one = {k: v for k, v in a.items() if k != "dates"}
            one.update(a["dates"][date])
            one["date"] = date
            two = {k: v for k, v in b.items() if k != "dates"}
            two.update(b["dates"][date])
            two["date"] = day2
            out.append([one, two])
    return out


def test_searches_equal_taus_loops_over_the_data(tools: AirlineTools) -> None:
    flights = load_json("airline", "db/flights.json")
    airports = list(json.loads(tools.call("list_all_airports", {})))
    assert len(airports) == 20
    found = overnight = 0
    for date in ("2024-05-05", "2024-05-16", "2024-05-30"):
        for origin in airports:
            for destination in airports:
                args = {"origin": origin, "destination": destination, "date": date}
                direct = tools.call("search_direct_flight", args)
                assert direct == json.dumps(_reference_direct(flights, **args))
                onestop = tools.call("search_onestop_flight", args)
                assert onestop == json.dumps(_reference_onestop(flights, **args))
                pairs = json.loads(onestop)
                found += len(pairs)
                overnight += sum(p[1]["date"] != date for p in pairs)
    assert found > 100 and overnight > 0  # the comparison saw real results, overnight ones too


# -- calculate ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("2 + 2", "4.0"),
        ("(1200 - 2 * 50) / 3", "366.67"),
        ("2 ** 10", "1024.0"),
        ("2 ** 2000 / 2 ** 1990", "1024.0"),
        ("-(2 ** 3) // 3", "-3.0"),
        ("1 / 0", "Error: division by zero"),
        ("2 ** 2000", "Error: int too large to convert to float"),
        ("2 ** 0.5 ** -1", "4.0"),
        ("import os", "Error: invalid characters in expression"),
        ("1 +", "Error: invalid syntax (<string>, line 1)"),
    ],
)
def test_calculate_answers_as_taus_eval(tools: AirlineTools, expression: str, answer: str) -> None:
    assert tools.call("calculate", {"expression": expression}) == answer


def _taus_calculate(expression: str) -> str:
    """τ-bench's calculate, the reference (only on expressions that end quickly)."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        return "Error: invalid characters in expression"
    try:
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as e:
        return f"Error: {e}"


_ODD = ["", " ", "  2 + 2", "()", "(2)(3)", "(2)(2 ** 3)", "...", "(-8) ** 0.5", "2.5 ** 3",
        "10 ** -2", "0 ** -1", "(1)(*())", "3 ** 3 ** 3", ".5 ** 2", "1. ** 2", "10 ** 400",
        "10.0 ** 400", "4 // 0", "2 ** 3 // 0", "1 / 3 * 3", "((2)", "1 2", "--1",
        "+-+2 ** 2"]  # fmt: skip


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@pytest.mark.parametrize("expression", _ODD)
def test_calculate_equals_taus_eval_on_odd_input(tools: AirlineTools, expression: str) -> None:
    assert tools.call("calculate", {"expression": expression}) == _taus_calculate(expression)


def test_calculate_refuses_a_power_that_would_hang_the_process(tools: AirlineTools) -> None:
    out = tools.call("calculate", {"expression": "9 ** 9 ** 9 ** 9"})
    assert out == "Error: int too large to convert to float"  # τ-bench's own text, at once


def test_think_and_transfer_answer_as_tau(tools: AirlineTools) -> None:
    assert tools.call("think", {"thought": "hm"}) == ""
    assert tools.call("transfer_to_human_agents", {"summary": "s"}) == "Transfer successful"
    assert tools.db.changes() == {}
