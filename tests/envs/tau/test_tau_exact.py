"""``reward=tau`` to the letter: τ-bench's data hash, its tools' answers to odd arguments, and
text that cannot be encoded, each checked against what τ-bench's code does (file and function
named in each test).

τ-bench calls ``tool.invoke(data, **kwargs)`` with the agent's JSON as it is and answers any
exception as ``"Error: <exception>"`` (``tau_bench/envs/base.py`` ``Env.step``); its grade compares
``sha256(str(to_hashable(data)))`` of the final and the gold data (``Env.calculate_reward``), in
which ``1490.0``, ``1490`` and ``True`` all differ.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest

from envlab.core import Action, ToolCall
from envlab.core.tools import example_arguments
from envlab.envs.perturb import perturb
from envlab.envs.tau.airline import AIRLINE_SCHEMA, AirlineTools
from envlab.envs.tau.db import Database
from envlab.envs.tau.retail import RETAIL_SCHEMA, RetailTools
from envlab.envs.tau.spec import TauAirline, TauRetail, TauSpec
from tests.envs.tau.test_tau_env import Script
from tests.support.play import play


def airline() -> AirlineTools:
    tools = AirlineTools()
    tools.db = Database("airline", AIRLINE_SCHEMA)
    return tools


def retail() -> RetailTools:
    tools = RetailTools()
    tools.db = Database("retail", RETAIL_SCHEMA)
    return tools


# -- the grade: τ-bench's hash -------------------------------------------------------------------


def _with_amounts(actions: list[Action], cast: type) -> list[Action]:
    out = []
    for action in actions:
        calls = []
        for call in action.tool_calls:
            args = copy.deepcopy(call.arguments)
            for payment in args.get("payment_methods", []) if isinstance(args, dict) else []:
                payment["amount"] = cast(payment["amount"])
            calls.append(ToolCall(call.name, args, id=call.id))
        out.append(Action(text=action.text, tool_calls=calls) if calls else action)
    return out


async def test_airline_task_0_paid_in_float_amounts_scores_0_as_in_tau() -> None:
    """The booking stores ``payment_methods`` as ``payment_history`` as sent
    (tau_bench/envs/airline/tools/book_reservation.py ``BookReservation.invoke``); 250.0 and 250
    hash differently (tau_bench/envs/base.py ``to_hashable``, ``consistent_hash``)."""
    spec = TauAirline()
    task = spec.tasks()[0]
    gold = spec.new_episode().oracle_actions(task)
    floats = await play(spec, Script(_with_amounts(gold, float)), task)
    ints = await play(spec, Script(_with_amounts(gold, int)), task)
    assert ints.reward == 1.0
    assert floats.reward == 0.0 and floats.components["db_match"] == 0.0


def test_a_value_written_back_with_another_type_is_a_change() -> None:
    """1 and True, 0 and 0.0 are equal in Python and different in τ-bench's hash."""
    tools = airline()
    user = tools.db.get("users", "mia_li_3668")
    assert user is not None
    certificate = user["payment_methods"]["certificate_4856383"]
    certificate["amount"] = float(certificate["amount"])
    tools.db.put("users", "mia_li_3668", user)
    assert tools.db.changes() == {"users": {"mia_li_3668": user}}
    certificate["amount"] = int(certificate["amount"])
    tools.db.put("users", "mia_li_3668", user)
    assert tools.db.changes() == {}


# -- arguments τ-bench stores as sent ------------------------------------------------------------


def test_a_booking_checks_only_what_it_computes_with() -> None:
    """book_reservation.py ``BookReservation.invoke``: origin, destination, flight_type and
    insurance are stored unchecked (insurance is only compared with "yes"); cabin and
    ``len(passengers)`` are read only inside the loop over flights and under insurance "yes";
    no flights, no payments and no bags add up to 0: the booking is made as sent."""
    tools = airline()
    kwargs = {
        "user_id": "mia_li_3668",
        "origin": 1,
        "destination": None,
        "flight_type": 7,
        "cabin": "first",
        "flights": [],
        "passengers": 3,
        "payment_methods": [],
        "total_baggages": "x",
        "nonfree_baggages": 0,
        "insurance": "maybe",
    }
    made = json.loads(tools.call("book_reservation", kwargs))
    stored = tools.db.get("reservations", "HATHAT")
    assert made == stored
    assert stored is not None
    assert {k: stored[k] for k in kwargs if k != "payment_methods"} == {
        k: v for k, v in kwargs.items() if k != "payment_methods"
    }
    assert stored["payment_history"] == []


def test_a_booking_reads_fields_in_taus_order() -> None:
    """book_reservation.py: ``flight['flight_number']`` and ``flight['date']`` are read in the
    loop (a missing key is τ-bench's KeyError); ``payment['amount']`` before the payment id is
    looked up; a string amount fails the sum (int + str)."""
    tools = airline()
    base = {
        "user_id": "mia_li_3668",
        "origin": "JFK",
        "destination": "SEA",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
        "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
        "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 152}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    assert tools.call("book_reservation", base).startswith('{"reservation_id": "HATHAT"')
    tools = airline()
    cases = {
        "Error: 'date'": {"flights": [{"flight_number": "HAT136"}]},
        "Error: 'amount'": {"payment_methods": [{"payment_id": "nope"}]},
        "Error: unsupported operand type(s) for +: 'int' and 'str'": {
            "payment_methods": [{"payment_id": "credit_card_4421486", "amount": "152"}]
        },
        "Error: unsupported operand type(s) for +=: 'int' and 'str'": {"nonfree_baggages": "0"},
        "Error: 'first'": {"cabin": "first"},
    }
    for text, change in cases.items():
        assert tools.call("book_reservation", {**base, **change}) == text
    assert tools.db.changes() == {}


def test_changes_to_a_reservation_take_any_value_taus_tools_take() -> None:
    """update_reservation_passengers.py: only ``len(passengers)`` is checked;
    update_reservation_flights.py: with no flights the cabin is never read, the old price is
    refunded; update_reservation_baggages.py: ``total_baggages`` is stored unread."""
    tools = airline()
    got = json.loads(tools.call("update_reservation_passengers", {
        "reservation_id": "JP6LYC", "passengers": "ab"}))  # fmt: skip
    assert got["passengers"] == "ab" == tools.db.get("reservations", "JP6LYC")["passengers"]  # type: ignore[index]
    got = json.loads(tools.call("update_reservation_flights", {
        "reservation_id": "JP6LYC", "cabin": 5, "flights": [],
        "payment_id": "gift_card_6579716"}))  # fmt: skip
    assert got["flights"] == [] and got["cabin"] == "business"
    assert got["payment_history"][-1]["amount"] < 0
    got = json.loads(tools.call("update_reservation_baggages", {
        "reservation_id": "JP6LYC", "total_baggages": [1], "nonfree_baggages": 0,
        "payment_id": "gift_card_6579716"}))  # fmt: skip
    assert got["total_baggages"] == [1]
    assert tools.call("send_certificate", {"user_id": "mia_li_3668", "amount": "50"}) == (
        "Certificate certificate_3221322 added to user mia_li_3668 with amount 50."
    )
    user = tools.db.get("users", "mia_li_3668")
    assert user is not None and user["payment_methods"]["certificate_3221322"]["amount"] == "50"


def test_retail_writes_take_any_value_taus_tools_take() -> None:
    """exchange_delivered_order_items.py: ``sorted(item_ids)`` of an empty string is []
    (no item to check, lengths 0 and 0); modify_user_address.py stores the fields as sent;
    cancel_pending_order.py answers a reason that is not one of the two "invalid reason"."""
    tools = retail()
    got = json.loads(tools.call("exchange_delivered_order_items", {
        "order_id": "#W4817420", "item_ids": "", "new_item_ids": {},
        "payment_method_id": "gift_card_8168843"}))  # fmt: skip
    assert got["exchange_items"] == [] and got["exchange_new_items"] == []
    assert got["exchange_price_difference"] == 0
    address = {"address1": 1, "address2": None, "city": [], "state": {}, "country": True}
    got = json.loads(tools.call("modify_user_address", {
        "user_id": "sofia_rossi_8776", **address, "zip": math.nan}))  # fmt: skip
    assert got["address"]["city"] == [] and math.isnan(got["address"]["zip"])
    assert tools.call("find_user_id_by_email", {"email": "sofia.rossi2645@example.com"}) == (
        "sofia_rossi_8776"
    )
    assert tools.call("cancel_pending_order", {"order_id": "#W5918442", "reason": 5}) == (
        "Error: invalid reason"
    )


@pytest.mark.parametrize(
    ("name", "kwargs", "answer"),
    [
        # tau_bench/envs/retail/tools/get_user_details.py: `user_id in users` of a list raises
        ("get_user_details", {"user_id": ["x"]}, "Error: unhashable type: 'list'"),
        # get_product_details.py: the int 9523456873 is not the key "9523456873"
        ("get_product_details", {"product_id": 9523456873}, "Error: product not found"),
        # find_user_id_by_email.py: `email.lower()`
        ("find_user_id_by_email", {"email": 5}, "Error: 'int' object has no attribute 'lower'"),
        # find_user_id_by_name_zip.py: a zip compared with == never equals a number
        (
            "find_user_id_by_name_zip",
            {"first_name": "Sofia", "last_name": "Rossi", "zip": 78784},
            "Error: user not found",
        ),
        # think.py returns "" whatever the thought
        ("think", {"thought": None}, ""),
    ],
)
def test_retail_reads_answer_as_taus(name: str, kwargs: dict[str, Any], answer: str) -> None:
    assert retail().call(name, kwargs) == answer


def test_a_malformed_date_on_an_overnight_route_is_taus_error_not_a_crash() -> None:
    """search_onestop_flight.py: ``int(date[-2:])`` for a first leg arriving "+1"."""
    tools = airline()
    got = tools.call("search_onestop_flight", {"origin": "LGA", "destination": "SFO",
                                               "date": "2024-05-xx"})  # fmt: skip
    assert got == "Error: invalid literal for int() with base 10: 'xx'"
    assert tools.call("search_direct_flight", {"origin": 1, "destination": "SFO",
                                               "date": "2024-05-01"}) == "[]"  # fmt: skip


# -- the episode: transfer ends it, undecodable text is a tool error -----------------------------


@pytest.mark.parametrize("arguments", [{"summary": 5}, {}, {"summary": "x", "more": 1}])
async def test_any_transfer_ends_the_conversation_as_in_tau(arguments: dict[str, Any]) -> None:
    """tau_bench/envs/base.py ``Env.step``: ``done`` when the action names a terminate tool,
    whatever its invocation answered; transfer_to_human_agents.py ignores the summary."""
    spec = TauRetail()
    env = spec.new_episode()
    await env.reset(spec.tasks()[0], 0)
    step = await env.step(Action(tool_calls=[ToolCall("transfer_to_human_agents", arguments)]))
    assert step.done
    result = step.observation.tool_results[0]
    assert result.is_error == ("summary" not in arguments or "more" in arguments)
    await env.close()


BAD = "x\ud800"


def _poisoned(value: Any) -> list[Any]:
    """``value`` with a lone surrogate put in each of its strings and keys, one at a time."""
    out: list[Any] = []
    if isinstance(value, str):
        return [BAD]
    if isinstance(value, dict):
        out.append({**value, BAD: 1})
        for k, v in value.items():
            out += [{**value, k: p} for p in _poisoned(v)]
    elif isinstance(value, list):
        out += [[p, *value[1:]] for p in _poisoned(value[0])] if value else [[BAD]]
    return out


def _arguments(spec: TauSpec) -> dict[str, dict[str, Any]]:
    """An argument set per tool: a gold call's where there is one, else the schema's example."""
    env = spec.new_episode()
    args = {t.name: example_arguments(t.parameters) for t in env.tools}
    for task in spec.tasks():
        for action in task.answer["actions"]:
            args[action["name"]] = action["kwargs"]
    return args


@pytest.mark.parametrize("spec_cls", [TauRetail, TauAirline])
async def test_a_lone_surrogate_in_any_argument_of_any_tool_is_a_tool_error(
    spec_cls: type[TauSpec],
) -> None:
    """Text that cannot be encoded as UTF-8 (a lone surrogate, JSON's "\\ud800") is refused
    before any tool runs: never an exception of the episode, never echoed back, nothing
    written."""
    spec = spec_cls()
    task = spec.tasks()[0]
    env = spec.new_episode()
    await env.reset(task, 0)
    calls: list[ToolCall] = [ToolCall(BAD, {})]
    for name, args in _arguments(spec).items():
        calls += [ToolCall(name, p) for p in _poisoned(args)]
        calls.append(ToolCall(name, json.dumps(_poisoned(args)[0])))  # type: ignore[arg-type]
    assert len(calls) > 50
    for call in calls:
        result = await env.call_tool(call)
        assert result.is_error, call
        result.content.encode("utf-8")  # what the agent reads is encodable
        env.done = False  # a transfer call ends the conversation; keep calling
    assert env.state()["changes"] == {}
    json.dumps(env.state(), ensure_ascii=False).encode("utf-8")
    await env.close()


async def test_a_call_a_perturbation_refuses_keeps_no_unencodable_argument() -> None:
    """A call answered before any tool runs (a transient fault) is logged without arguments
    that cannot be encoded, so the episode's state and trajectory can be written."""
    spec = perturb(TauRetail(), "transient=1.0")
    env = spec.new_episode()
    await env.reset(spec.tasks()[0], 0)
    step = await env.step(Action(tool_calls=[ToolCall("get_user_details", {"user_id": BAD})]))
    assert step.observation.tool_results[0].is_error
    json.dumps(env.state(), ensure_ascii=False).encode("utf-8")
    await env.close()
