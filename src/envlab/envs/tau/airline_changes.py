"""The airline tools that change an existing reservation (cancel, baggage, flights,
passengers), as τ-bench's: the same checks in the same order, texts, records and arithmetic."""

from __future__ import annotations

import json

from envlab.core import ToolCallError
from envlab.core.tools import tool
from envlab.envs.tau.airline_types import Cabin, Flight, Passenger
from envlab.envs.tau.db import Database, Record


class ReservationChanges:
    """A mixin of ``AirlineTools``: reservation lookups, pricing and the tools that change a
    reservation."""

    db: Database

    def _reservation(self, reservation_id: str) -> Record:
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            raise ToolCallError("reservation not found")
        return reservation

    def _method(self, reservation: Record, payment_id: str, price: int | float) -> Record:
        """The owner's payment method ``payment_id``, if it may pay ``price`` for a change."""
        user = self.db.get("users", reservation["user_id"])
        if user is None:  # τ-bench: a KeyError on the missing user id
            raise ToolCallError(repr(reservation["user_id"]))
        method = user["payment_methods"].get(payment_id)
        if method is None:
            raise ToolCallError("payment method not found")
        if method["source"] == "certificate":
            raise ToolCallError("certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < price:
            raise ToolCallError("gift card balance is not enough")
        return method

    def _pay(self, reservation: Record, payment_id: str, price: int | float) -> None:
        """Charge ``price`` (a refund when negative) to the checked method; record it."""
        user = self.db.get("users", reservation["user_id"])
        assert user is not None, "checked by _method"
        method = user["payment_methods"][payment_id]
        if method["source"] == "gift_card":
            method["amount"] -= price
            self.db.put("users", reservation["user_id"], user)
        if price != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": price})

    def _price(
        self, flights: list[Record], cabin: str, seats: int, kept: list[Record]
    ) -> int | float:
        """Add price, origin and destination to each flight (from ``kept``, the reservation's
        own segments, where one matches); the price of ``seats`` seats on all of them."""
        total: int | float = 0
        for flight in flights:
            number, date = flight["flight_number"], flight["date"]
            same = [f for f in kept if f["flight_number"] == number and f["date"] == date]
            if same:
                total += same[0]["price"] * seats
                flight["price"] = same[0]["price"]
                flight["origin"] = same[0]["origin"]
                flight["destination"] = same[0]["destination"]
                continue
            data = self.db.get("flights", number)
            if data is None:
                raise ToolCallError(f"flight {number} not found")
            day = data["dates"].get(date)
            if day is None:
                raise ToolCallError(f"flight {number} not found on date {date}")
            if day["status"] != "available":
                raise ToolCallError(f"flight {number} not available on date {date}")
            if day["available_seats"][cabin] < seats:
                raise ToolCallError(f"not enough seats on flight {number}")
            flight["price"] = day["prices"][cabin]
            flight["origin"] = data["origin"]
            flight["destination"] = data["destination"]
            total += flight["price"] * seats
        return total

    @tool(writes=True)
    def cancel_reservation(self, reservation_id: str) -> str:
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

    @tool(writes=True)
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
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

    @tool(writes=True)
    def update_reservation_flights(
        self, reservation_id: str, cabin: Cabin, flights: list[Flight], payment_id: str
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
        seats = len(reservation["passengers"])
        kept = reservation["flights"] if cabin == reservation["cabin"] else []
        price = self._price(flights, cabin, seats, kept)
        price -= sum(flight["price"] for flight in reservation["flights"]) * seats
        self._method(reservation, payment_id, price)
        reservation["flights"] = flights  # the cabin stays as it was: τ-bench's behaviour
        self._pay(reservation, payment_id, price)
        self.db.put("reservations", reservation_id, reservation)
        return json.dumps(reservation)

    @tool(writes=True)
    def update_reservation_passengers(
        self, reservation_id: str, passengers: list[Passenger]
    ) -> str:
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
