"""The argument types of the airline tools: their JSON schemas are τ-bench's (tools.json), and
what the agent sends is kept as sent, as τ-bench keeps it (it checks no argument)."""

from __future__ import annotations

import copy
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    with_config,
)
from typing_extensions import TypedDict

Number = Annotated[StrictInt | StrictFloat, WithJsonSchema({"type": "number"})]
"""A JSON number kept as sent: an int stays an int (τ-bench prints ``250``, not ``250.0``)."""

Cabin = Literal["basic_economy", "economy", "business"]


def _as_sent(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Check an item's fields, but keep the item as the agent sent it: τ-bench stores the
    agent's objects untouched (their key order and any extra keys)."""
    checked = handler(value)
    if not isinstance(value, dict):
        return checked
    return {k: checked[k] if k in checked else copy.deepcopy(v) for k, v in value.items()}


_ITEM = ConfigDict(extra="ignore")  # extra keys pass (kept by _as_sent), as in τ-bench


def _described(description: str) -> Any:
    return Field(description=description)


@with_config(_ITEM)
class FlightItem(TypedDict):
    flight_number: Annotated[str, _described("Flight number, such as 'HAT001'.")]
    date: Annotated[
        str,
        _described("The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."),
    ]


@with_config(_ITEM)
class PassengerItem(TypedDict):
    first_name: Annotated[str, _described("The first name of the passenger, such as 'Noah'.")]
    last_name: Annotated[str, _described("The last name of the passenger, such as 'Brown'.")]
    dob: Annotated[
        str,
        _described(
            "The date of birth of the passenger in the format 'YYYY-MM-DD', such as '1990-01-01'."
        ),
    ]


@with_config(_ITEM)
class PaymentItem(TypedDict):
    payment_id: Annotated[
        str,
        _described(
            "The payment id stored in user profile, such as 'credit_card_7815826', "
            "'gift_card_7815826', 'certificate_7815826'."
        ),
    ]
    amount: Annotated[Number, _described("The amount to be paid.")]


Flight = Annotated[FlightItem, WrapValidator(_as_sent)]
Passenger = Annotated[PassengerItem, WrapValidator(_as_sent)]
Payment = Annotated[PaymentItem, WrapValidator(_as_sent)]
