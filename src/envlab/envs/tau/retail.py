"""τ-bench's retail domain: users, orders and products, and the tools of its customer-service agent.

The tools behave as τ-bench's (``tau_bench/envs/retail/tools``): the same answers (records as
``json.dumps`` of them, the same ``Error: ...`` texts, checks in the same order), the same writes
(same keys in the same order, the same float arithmetic) over the episode's SQLite ``Database``,
on the arguments as sent (``envs/tau/tools.py``: an address field is stored whatever its type, an
id that is not a string is found nowhere). Tools on orders are in ``retail_orders``;
``RetailTools`` is the domain's whole tool set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from envlab.core import ToolCallError
from envlab.envs.tau.common import CommonTools
from envlab.envs.tau.db import Record, Schema
from envlab.envs.tau.retail_orders import DeliveredOrderTools, PendingOrderTools, address
from envlab.envs.tau.tools import DomainTools, Text, tau_tool

RETAIL_SCHEMA = Schema(
    tables=("users", "orders", "products"),
    indexes={"users": ("email", "address.zip")},
)
"""Users are found by email and by name + zip: both lookups go through an index."""


class RetailTools(DomainTools, CommonTools, PendingOrderTools, DeliveredOrderTools):
    """The 16 tools of τ-bench's retail agent over the episode's ``db`` (``RETAIL_SCHEMA``)."""

    @tau_tool
    def find_user_id_by_email(self, email: Text) -> str:
        """Find user id by email. If the user is not found, the function will return an error
        message.

        Args:
            email: The email of the user, such as 'something@example.com'.
        """
        # τ-bench compares lowercased emails; every stored email is lowercase (no tool changes
        # one), so the indexed equality with the lowercased query is the same test.
        needle = email.lower()  # τ-bench's AttributeError for a number
        for user_id, _ in self.db.where("users", email=needle)[:1]:
            return user_id
        raise ToolCallError("user not found")

    @tau_tool
    def find_user_id_by_name_zip(self, first_name: Text, last_name: Text, zip: Text) -> str:
        """Find user id by first name, last name, and zip code. If the user is not found, the
        function will return an error message. By default, find user id by email, and only call
        this function if the user is not found by email or cannot remember email.

        Args:
            first_name: The first name of the customer, such as 'John'.
            last_name: The last name of the customer, such as 'Doe'.
            zip: The zip code of the customer, such as '12345'.
        """
        users: Iterable[tuple[str, Record]]
        if all(isinstance(x, str) for x in (first_name, last_name, zip)):
            users = self.db.where("users", address_zip=zip)
        else:  # τ-bench's loop over every user, with its errors (`first_name.lower()`)
            users = self.db.items("users")
        for user_id, user in users:
            name = user["name"]
            if (
                name["first_name"].lower() == first_name.lower()
                and name["last_name"].lower() == last_name.lower()
                and user["address"]["zip"] == zip
            ):
                return user_id
        raise ToolCallError("user not found")

    @tau_tool
    def get_user_details(self, user_id: Text) -> str:
        """Get the details of a user, including their orders.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return json.dumps(self._record("users", user_id, "user"))

    @tau_tool
    def get_order_details(self, order_id: Text) -> str:
        """Get the status and details of an order.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
        """
        return json.dumps(self._record("orders", order_id, "order"))

    @tau_tool
    def get_product_details(self, product_id: Text) -> str:
        """Get the inventory details of a product.

        Args:
            product_id: The product id, such as '6086499569'. Be careful the product id is
                different from the item id.
        """
        return json.dumps(self._record("products", product_id, "product"))

    @tau_tool
    def list_all_product_types(self) -> str:
        """List the name and product id of all product types. Each product type has a variety of
        different items with unique item ids and options. There are only 50 product types in the
        store."""
        # in data order: a later product of a name wins
        names = {product["name"]: product["product_id"] for _, product in self.db.items("products")}
        return json.dumps(dict(sorted(names.items())))

    @tau_tool(writes=True)
    def modify_user_address(
        self,
        user_id: Text,
        address1: Text,
        address2: Text,
        city: Text,
        state: Text,
        country: Text,
        zip: Text,
    ) -> str:
        """Modify the default address of a user. The agent needs to explain the modification
        detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            address1: The first line of the address, such as '123 Main St'.
            address2: The second line of the address, such as 'Apt 1' or ''.
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        user = self._record("users", user_id, "user")
        user["address"] = address(address1, address2, city, state, country, zip)
        self.db.put("users", user_id, user)
        return json.dumps(user)

    @tau_tool
    def think(self, thought: Text) -> str:
        """Use the tool to think about something. It will not obtain new information or change the
        database, but just append the thought to the log. Use it when complex reasoning or some
        cache memory is needed.

        Args:
            thought: A thought to think about.
        """
        return ""

    def _record(self, table: str, key: Any, noun: str) -> Record:
        record = self.db.get(table, key)
        if record is None:
            raise ToolCallError(f"{noun} not found")
        return record
