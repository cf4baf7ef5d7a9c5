"""τ-bench's airline domain: its 14 tools over the episode's SQLite database.

Each tool behaves as τ-bench's (sierra-research/tau-bench, ``tau_bench/envs/airline/tools``):
the same checks in the same order, the same error texts, records built with the same keys in
the same order, the same arithmetic, so the gold actions of every task return τ-bench's results
and leave its database. τ-bench's quirks are kept, since its grade is defined by them:
``get_reservation_details`` answers "user not found" for an unknown reservation; cancelling
checks nothing (flown segments, the 24-hour rule and insurance are the policy's, not the tool's);
booking takes no seats; changing flights keeps the reservation's cabin; a one-stop search names
an overnight connection's day without a leading zero and reads the second flight's prices on
the first flight's day; ``send_certificate`` answers ``None`` once a user holds its three ids.
Arguments reach the tools as sent, as in τ-bench, which checks none (``envs/tau/tools.py``):
what a tool stores is stored as sent (nested items with their key order and extra keys, a float
or a string where the schema says integer), what it computes with fails as τ-bench's arithmetic
fails, and where τ-bench would raise (a ``KeyError``, a ``TypeError``) the agent reads the same
text, with the same partial changes.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from envlab.core import ToolCallError
from envlab.envs.tau.airline_changes import ReservationChanges
from envlab.envs.tau.airline_types import (
    Cabin,
    Flights,
    FlightType,
    Insurance,
    Number,
    Passengers,
    Payments,
)
from envlab.envs.tau.common import CommonTools
from envlab.envs.tau.db import Record, Schema
from envlab.envs.tau.tools import DomainTools, Integer, Text, tau_tool

AIRLINE_SCHEMA = Schema(
    tables=("flights", "users", "reservations"),
    indexes={"flights": ("origin", "destination")},
)

RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
"""τ-bench's ids for new reservations: the first free one, else the last (overwritten)."""
CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
CREATED_AT = "2024-05-15T15:00:00"
AIRPORTS = {
    "SFO": "San Francisco", "JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago",
    "DFW": "Dallas", "DEN": "Denver", "SEA": "Seattle", "ATL": "Atlanta", "MIA": "Miami",
    "BOS": "Boston", "PHX": "Phoenix", "IAH": "Houston", "LAS": "Las Vegas",
    "MCO": "Orlando", "EWR": "Newark", "CLT": "Charlotte", "MSP": "Minneapolis",
    "DTW": "Detroit", "PHL": "Philadelphia", "LGA": "LaGuardia",
}  # fmt: skip


class AirlineTools(ReservationChanges, CommonTools, DomainTools):
    """τ-bench's airline tools (users, flights, reservations); the ones that change a
    reservation are in ``ReservationChanges``."""

    # -- reading ------------------------------------------------------------------------------

    def _user(self, user_id: Any) -> Record:
        user = self.db.get("users", user_id)
        if user is None:
            raise ToolCallError("user not found")
        return user

    @tau_tool
    def get_user_details(self, user_id: Text) -> str:
        """Get the details of an user, including their reservations.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return json.dumps(self._user(user_id))

    @tau_tool
    def get_reservation_details(self, reservation_id: Text) -> str:
        """Get the details of a reservation.

        Args:
            reservation_id: The reservation id, such as '8JX2WO'.
        """
        reservation = self.db.get("reservations", reservation_id)
        if reservation is None:
            raise ToolCallError("user not found")  # sic: τ-bench's text
        return json.dumps(reservation)

    @tau_tool
    def list_all_airports(self) -> str:
        """List all airports and their cities."""
        return json.dumps(AIRPORTS)

    def _flights(self, **equal: Any) -> list[Record]:
        """The flights whose fields equal ``equal``, in the data's order: none for a value that
        is not a string (every airport in the data is one, and no tool changes a flight)."""
        if not all(isinstance(v, str) for v in equal.values()):
            return []
        return [flight for _, flight in self.db.where("flights", **equal)]

    @tau_tool
    def search_direct_flight(self, origin: Text, destination: Text, date: Text) -> str:
        """Search direct flights between two cities on a specific date.

        Args:
            origin: The origin city airport in three letters, such as 'JFK'.
            destination: The destination city airport in three letters, such as 'LAX'.
            date: The date of the flight in the format 'YYYY-MM-DD', such as '2024-01-01'.
        """
        results = []
        for flight in self._flights(origin=origin, destination=destination):
            if date in flight["dates"] and flight["dates"][date]["status"] == "available":
                day = flight["dates"][date]
                results.append({k: v for k, v in flight.items() if k != "dates"} | day)
        return json.dumps(results)

    @tau_tool
    def search_onestop_flight(self, origin: Text, destination: Text, date: Text) -> str:
        """Search direct flights between two cities on a specific date.

        Args:
            origin: The origin city airport in three letters, such as 'JFK'.
            destination: The destination city airport in three letters, such as 'LAX'.
            date: The date of the flight in the format 'YYYY-MM-DD', such as '2024-05-01'.
        """
        seconds = self._flights(destination=destination)
        results = []
        for first in self._flights(origin=origin):
            for second in seconds:  # τ-bench's errors (a date it cannot read) on the same pair
                if first["destination"] == second["origin"]:
                    pair = _connection(first, second, date)
                    if pair is not None:
                        results.append(pair)
        return json.dumps(results)

    # -- writing ------------------------------------------------------------------------------

    @tau_tool(writes=True)
    def book_reservation(
        self,
        user_id: Text,
        origin: Text,
        destination: Text,
        flight_type: FlightType,
        cabin: Cabin,
        flights: Flights,
        passengers: Passengers,
        payment_methods: Payments,
        total_baggages: Integer,
        nonfree_baggages: Integer,
        insurance: Insurance,
    ) -> str:
        """Book a reservation.

        Args:
            user_id: The ID of the user to book the reservation, such as 'sara_doe_496'.
            origin: The IATA code for the origin city, such as 'SFO'.
            destination: The IATA code for the destination city, such as 'JFK'.
            flights: An array of objects containing details about each piece of flight.
            passengers: An array of objects containing details about each passenger.
            payment_methods: An array of objects containing details about each payment method.
            total_baggages: The total number of baggage items included in the reservation.
            nonfree_baggages: The number of non-free baggage items included in the reservation.
        """
        user = self._user(user_id)
        free = [r for r in RESERVATION_IDS if self.db.get("reservations", r) is None]
        reservation_id = free[0] if free else RESERVATION_IDS[-1]
        reservation = {
            "reservation_id": reservation_id,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": copy.deepcopy(flights),
            "passengers": passengers,
            "payment_history": payment_methods,
            "created_at": CREATED_AT,
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }
        total = self._booking_price(reservation["flights"], cabin, passengers, insurance)
        total += 50 * nonfree_baggages
        self._check_payments(user["payment_methods"], payment_methods)
        paid = sum(payment["amount"] for payment in payment_methods)
        if paid != total:
            raise ToolCallError(
                f"payment amount does not add up, total price is {total}, but paid {paid}"
            )
        self._charge(user_id, user, payment_methods)
        self.db.put("reservations", reservation_id, reservation)
        user["reservations"].append(reservation_id)
        self.db.put("users", user_id, user)
        return json.dumps(reservation)

    def _booking_price(self, flights: Any, cabin: Any, passengers: Any, insurance: Any) -> Any:
        """τ-bench's price of a booking before its bags: each segment (cabin and passengers
        are read only there), then the insurance (``len(passengers)`` only if it is "yes")."""
        total: Any = 0
        for flight in flights:
            total += self._segment_price(flight, cabin, passengers)
        if insurance == "yes":
            total += 30 * len(passengers)
        return total

    @staticmethod
    def _check_payments(methods: Record, payments: Any) -> None:
        """τ-bench's checks of a booking's payments, in its order: each amount is read, then
        its method looked up; a gift card or certificate must hold the amount."""
        for payment in payments:
            payment_id, amount = payment["payment_id"], payment["amount"]
            if payment_id not in methods:
                raise ToolCallError(f"payment method {payment_id} not found")
            method = methods[payment_id]
            if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
                raise ToolCallError(f"not enough balance in payment method {payment_id}")

    def _charge(self, user_id: str, user: Record, payments: Any) -> None:
        """Take each payment: a gift card's balance goes down, a certificate is used up."""
        methods = user["payment_methods"]
        for payment in payments:
            method = methods.get(payment["payment_id"])
            if method is None:  # a certificate named twice: τ-bench's KeyError, after the first
                self.db.put("users", user_id, user)
                raise ToolCallError(repr(payment["payment_id"]))
            if method["source"] == "gift_card":
                method["amount"] -= payment["amount"]
            elif method["source"] == "certificate":
                del methods[payment["payment_id"]]

    @tau_tool(writes=True)
    def send_certificate(self, user_id: Text, amount: Number) -> str | None:
        """Send a certificate to a user. Be careful!

        Args:
            user_id: The ID of the user to book the reservation, such as 'sara_doe_496'.
            amount: Certificate amount to send.
        """
        user = self._user(user_id)
        for payment_id in CERTIFICATE_IDS:
            if payment_id not in user["payment_methods"]:
                user["payment_methods"][payment_id] = {
                    "source": "certificate",
                    "amount": amount,
                    "id": payment_id,
                }
                self.db.put("users", user_id, user)
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        return None  # sic: τ-bench answers nothing once the three ids are taken

    @tau_tool
    def think(self, thought: Text) -> str:
        """Use the tool to think about something. It will not obtain new information or change
        the database, but just append the thought to the log. Use it when complex reasoning is
        needed.

        Args:
            thought: A thought to think about.
        """
        return ""


def _connection(first: Record, second: Record, date: str) -> list[Record] | None:
    """τ-bench's one-stop pair of ``first`` (leaving on ``date``) and ``second``, or None.

    Kept as τ-bench has it: the next day of an overnight first leg is ``2024-05-{day + 1}``
    (no leading zero, so no match before the 10th); times compare as text; the second leg's
    status, seats and prices are read on ``date``, not on its own day."""
    arrival = first["scheduled_arrival_time_est"]
    date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in arrival else date
    if arrival > second["scheduled_departure_time_est"]:
        return None
    if date not in first["dates"] or date2 not in second["dates"]:
        return None
    if first["dates"][date]["status"] != "available":
        return None
    if second["dates"][date2]["status"] != "available":
        return None
    leg1 = {k: v for k, v in first.items() if k != "dates"} | first["dates"][date]
    leg1["date"] = date
    leg2 = {k: v for k, v in second.items() if k != "dates"} | second["dates"][date]
    leg2["date"] = date2
    return [leg1, leg2]
