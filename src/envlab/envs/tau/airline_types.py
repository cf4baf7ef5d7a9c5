"""The argument types of the airline tools: their JSON schemas are τ-bench's (tools.json), and
what the agent sends reaches the tool as sent, as in τ-bench (it checks no argument): each is
``Annotated[Any, Sent(T)]``, ``T`` the published type (``envs/tau/tools.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, with_config
from typing_extensions import TypedDict

from envlab.envs.tau.tools import Sent

_NUMBER = Annotated[float, WithJsonSchema({"type": "number"})]
_ITEM = ConfigDict(extra="ignore")  # the items are only published: never validated


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
    amount: Annotated[_NUMBER, _described("The amount to be paid.")]


Cabin = Annotated[Any, Sent(Literal["basic_economy", "economy", "business"])]
FlightType = Annotated[Any, Sent(Literal["one_way", "round_trip"])]
Insurance = Annotated[Any, Sent(Literal["yes", "no"])]
Flights = Annotated[Any, Sent(list[FlightItem])]
Passengers = Annotated[Any, Sent(list[PassengerItem])]
Payments = Annotated[Any, Sent(list[PaymentItem])]
Number = Annotated[Any, Sent(_NUMBER)]
