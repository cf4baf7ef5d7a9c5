"""What τ-bench does with a wrongly typed argument, as rules read off its code, for the tests.

τ-bench (sierra-research/tau-bench) cannot be imported here (not installed, no network), so the
expected outcome of each typed variant of a gold argument is a rule derived from its source; each
rule names the file and function it comes from. τ-bench's ``Env.step`` (``tau_bench/envs/base.py``)
passes the agent's JSON arguments to ``tool.invoke(data, **kwargs)`` unchecked and answers any
exception as ``"Error: <exception>"``; a tool's own refusals are ``return "Error: ..."`` before it
changes ``data``. So for each argument there are two outcomes:

- ``REFUSED``: the tool returns an error and changes nothing (the final database is the one
  reached without the call);
- ``WRITTEN``: the tool succeeds and the value is stored as sent, type and all (so τ-bench's
  data hash, which tells ``1490.0`` from ``1490`` and ``True`` from ``1``, no longer matches).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

REFUSED, WRITTEN = "refused", "written"

Path = tuple[str | int, ...]

AIRLINE = "tau_bench/envs/airline/tools"
RETAIL = "tau_bench/envs/retail/tools"

STORED_ONLY: dict[tuple[str, str], str] = {
    ("book_reservation", "total_baggages"): f"{AIRLINE}/book_reservation.py BookReservation"
    ".invoke: put in the reservation dict, never read",
    ("update_reservation_baggages", "total_baggages"): f"{AIRLINE}/update_reservation_baggages"
    ".py UpdateReservationBaggages.invoke: `reservation['total_baggages'] = total_baggages`",
    ("send_certificate", "amount"): f"{AIRLINE}/send_certificate.py SendCertificate.invoke: "
    "the certificate's `amount`, never read",
    ("modify_user_address", "zip"): f"{RETAIL}/modify_user_address.py ModifyUserAddress.invoke:"
    " the new address dict holds the arguments as sent",
    ("modify_pending_order_address", "zip"): f"{RETAIL}/modify_pending_order_address.py "
    "ModifyPendingOrderAddress.invoke: the new address dict holds the arguments as sent",
}
"""Arguments τ-bench stores without using them: any value is written as sent."""

ARITHMETIC: dict[tuple[str, str], str] = {
    ("book_reservation", "nonfree_baggages"): f"{AIRLINE}/book_reservation.py BookReservation"
    ".invoke: `total_price += 50 * nonfree_baggages` (a string repeats: int += str raises "
    "TypeError), then `sum(amounts) != total_price` (numbers compare by value), then stored",
    ("book_reservation", "amount"): f"{AIRLINE}/book_reservation.py BookReservation.invoke: "
    "`balance < amount` for gift cards and certificates, `sum(payment['amount'] ...)` for "
    "all (a string raises TypeError); the payment list is stored as `payment_history`",
    ("update_reservation_baggages", "nonfree_baggages"): f"{AIRLINE}/"
    "update_reservation_baggages.py UpdateReservationBaggages.invoke: `nonfree_baggages - "
    "reservation['nonfree_baggages']` (a string raises TypeError), then stored",
}
"""Numbers τ-bench computes with, then stores: a string raises ``TypeError`` before any change;
an int, a float or a bool of the same value passes every check and is stored as sent."""

LOOKED_UP = (
    f"{RETAIL}/*.py: ids are looked up in dicts and lists of strings (`order_id not in orders`, "
    "`item_ids.count(item_id) > all_item_ids.count(item_id)`, `new_item_id in "
    "products[product_id]['variants']`, `profile['address']['zip'] == zip`); a number is never "
    "equal to a string, so the call answers an error"
)
"""Every other string argument with digits in the gold actions: an id or a zip looked up."""


def rule(tool: str, key: str, variant: Any) -> tuple[str, str]:
    """The outcome τ-bench's code gives ``variant`` (of the same value as the gold argument,
    another type) as argument ``key`` of ``tool``, and the source of the rule."""
    if (tool, key) in STORED_ONLY:
        return WRITTEN, STORED_ONLY[tool, key]
    if (tool, key) in ARITHMETIC:
        return (REFUSED if isinstance(variant, str) else WRITTEN), ARITHMETIC[tool, key]
    return REFUSED, LOOKED_UP


@dataclass(frozen=True)
class Variant:
    """The gold action ``action`` of a task with the argument at ``path`` set to ``value``."""

    action: int
    tool: str
    path: Path
    original: Any
    value: Any

    @property
    def key(self) -> str:
        return next(str(p) for p in reversed(self.path) if isinstance(p, str))

    def kwargs(self, gold: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(gold)
        node: Any = out
        for step in self.path[:-1]:
            node = node[step]
        node[self.path[-1]] = self.value
        return out


def _numeric_text(value: str) -> bool:
    return value.isdigit() or (value.count(".") == 1 and value.replace(".", "").isdigit())


def typed(value: Any) -> list[Any]:
    """The same value as other JSON types: int <-> float <-> bool (0 and 1 only) <-> string."""
    if isinstance(value, bool):
        return [int(value), float(value), str(value).lower()]
    if isinstance(value, int):
        return [float(value), str(value)] + ([bool(value)] if value in (0, 1) else [])
    if isinstance(value, float):
        return ([int(value)] if value.is_integer() else []) + [str(value)]
    if isinstance(value, str) and _numeric_text(value):
        return ([int(value)] if value.isdigit() else []) + [float(value)]
    return []


def _leaves(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:1]):  # the first item stands for the others
            yield from _leaves(v, (*path, i))
    else:
        yield path, value


def variants(actions: list[dict[str, Any]]) -> Iterator[Variant]:
    """Every typed variant of every number, bool and numeric string in the gold actions."""
    for i, action in enumerate(actions):
        for path, value in _leaves(action["kwargs"], ()):
            for other in typed(value):
                yield Variant(i, action["name"], path, value, other)
