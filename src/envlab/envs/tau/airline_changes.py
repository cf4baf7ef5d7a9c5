"""The airline tools that change an existing reservation (cancel, baggage, flights,
passengers), as τ-bench's: the same checks in the same order, texts, records and arithmetic,
on the arguments as sent (``envs/tau/tools.py``)."""

from __future__ import annotations

import copy
import json
from typing import Any

from envlab.core import ToolCallError
from envlab.envs.tau.airline_types import Cabin, Flights, Passengers
from envlab.envs.tau.db import Database, Record
from envlab.envs.tau.tools import Integer, Text, tau_tool


class ReservationChanges:
    """A mixin of ``AirlineTools``: reservation lookups, pricing and the tools that change a
    reservation."""

    db: Database

    def _reservation(self, reservation_id: Any) -> Record:
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            raise ToolCallError("reservation not found")
        return reservation

    def _method(self, reservation: Record, payment_id: Any, price: Any) -> Record:
        """The owner's payment method ``payment_id``, if it may pay ``price`` for a change."""
        user = self.db.get("users", reservation["user_id"])
        if user is None:  # τ-bench: a KeyError on the missing user id
            raise ToolCallError(repr(reservation["user_id"]))
        if payment_id not in user["payment_methods"]:
            raise ToolCallError("payment method not found")
        method: Record = user["payment_methods"][payment_id]
        if method["source"] == "certificate":
            raise ToolCallError("certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < price:
            raise ToolCallError("gift card balance is not enough")
        return method

    def _pay(self, reservation: Record, payment_id: str, price: Any) -> None:
        """Charge ``price`` (a refund when negative) to the checked method; record it."""
        user = self.db.get("users", reservation["user_id"])
        assert user is not None, "checked by _method"
        method = user["payment_methods"][payment_id]
        if method["source"] == "gift_card":
            method["amount"] -= price
            self.db.put("users", reservation["user_id"], user)
        if price != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": price})

    def _segment_price(self, flight: Any, cabin: Any, passengers: Any) -> Any:
        """The price of a new segment for ``passengers`` in ``cabin``, its price, origin and
        destination added to ``flight``: τ-bench's checks and reads in its order (the flight,
        its day, its status, the seats left in the cabin for ``len(passengers)``)."""
        number = flight["flight_number"]
        data = self.db.get("flights", number)
        if data is None:
            raise ToolCallError(f"flight {number} not found")
        if flight["date"] not in data["dates"]:
            raise ToolCallError(f"flight {number} not found on date {flight['date']}")
        day = data["dates"][flight["date"]]
        if day["status"] != "available":
            raise ToolCallError(f"flight {number} not available on date {flight['date']}")
        if day["available_seats"][cabin] < len(passengers):
            raise ToolCallError(f"not enough seats on flight {number}")
        flight["price"] = day["prices"][cabin]
        flight["origin"] = data["origin"]
        flight["destination"] = data["destination"]
        return flight["price"] * len(passengers)

    @tau_tool(writes=True)
    def cancel_reservation(self, reservation_id: Text) -> str:
        """Cancel the whole reservation.

        Args:
            reservation_id: The reservation ID, such as 'ZFA04Y'.
        """
        reservation = self._reservation(reservation_id)
        refunds = [
            {"payment_id": p["payment_id"], "amount": -p["amount"]}
            for p in reservation["payment_history"]
        ]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        self.db.put("reservations", reservation_id, reservation)
        return json.dumps(reservation)

    @tau_tool(writes=True)
    def update_reservation_baggages(
        self,
        reservation_id: Text,
        total_baggages: Integer,
        nonfree_baggages: Integer,
        payment_id: Text,
    ) -> str:
        """Update the baggage information of a reservation.

        Args:
            reservation_id: The reservation ID, such as 'ZFA04Y'.
            total_baggages: The updated total number of baggage items included in the
                reservation.
            nonfree_baggages: The updated number of non-free baggage items included in the
                reservation.
            payment_id: The payment id stored in user profile, such as 'credit_card_7815826',
                'gift_card_7815826', 'certificate_7815826'.
        """
        reservation = self._reservation(reservation_id)
        price = 50 * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        self._method(reservation, payment_id, price)
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        self._pay(reservation, payment_id, price)
        self.db.put("reservations", reservation_id, reservation)
        return json.dumps(reservation)

    @tau_tool(writes=True)
    def update_reservation_flights(
        self, reservation_id: Text, cabin: Cabin, flights: Flights, payment_id: Text
    ) -> str:
        """Update the flight information of a reservation.

        Args:
            reservation_id: The reservation ID, such as 'ZFA04Y'.
            flights: An array of objects containing details about each piece of flight in the
                ENTIRE new reservation. Even if the a flight segment is not changed, it should
                still be included in the array.
            payment_id: The payment id stored in user profile, such as 'credit_card_7815826',
                'gift_card_7815826', 'certificate_7815826'.
        """
        reservation = self._reservation(reservation_id)
        passengers = reservation["passengers"]
        price: Any = 0
        flights = copy.deepcopy(flights)
        for flight in flights:
            kept = [  # a segment of the reservation, in the same cabin: its price stays
                f
                for f in reservation["flights"]
                if f["flight_number"] == flight["flight_number"]
                and f["date"] == flight["date"]
                and cabin == reservation["cabin"]
            ]
            if kept:
                price += kept[0]["price"] * len(passengers)
                flight["price"] = kept[0]["price"]
                flight["origin"] = kept[0]["origin"]
                flight["destination"] = kept[0]["destination"]
            else:
                price += self._segment_price(flight, cabin, passengers)
        price -= sum(flight["price"] for flight in reservation["flights"]) * len(passengers)
        self._method(reservation, payment_id, price)
        reservation["flights"] = flights  # the cabin stays as it was: τ-bench's behaviour
        self._pay(reservation, payment_id, price)
        self.db.put("reservations", reservation_id, reservation)
        return json.dumps(reservation)

    @tau_tool(writes=True)
    def update_reservation_passengers(self, reservation_id: Text, passengers: Passengers) -> str:
        """Update the passenger information of a reservation.

        Args:
            reservation_id: The reservation ID, such as 'ZFA04Y'.
            passengers: An array of objects containing details about each passenger.
        """
        reservation = self._reservation(reservation_id)
        if len(passengers) != len(reservation["passengers"]):
            raise ToolCallError("number of passengers does not match")
        reservation["passengers"] = passengers
        self.db.put("reservations", reservation_id, reservation)
        return json.dumps(reservation)
