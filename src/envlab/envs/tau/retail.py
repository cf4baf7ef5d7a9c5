"""τ-bench's retail domain: users, orders and products, and the tools of its customer-service agent.

The tools behave as τ-bench's (``tau_bench/envs/retail/tools``): the same answers (records as
``json.dumps`` of them, the same ``Error: ...`` texts, checks in the same order), the same writes
(same keys in the same order, the same float arithmetic) over the episode's SQLite ``Database``.
Tools on orders are in ``retail_orders``; ``RetailTools`` is the domain's whole tool set.
"""

from __future__ import annotations

import json

from envlab.core import ToolCallError
from envlab.core.tools import tool
from envlab.envs.tau.common import CommonTools
from envlab.envs.tau.db import Record, Schema
from envlab.envs.tau.retail_orders import DeliveredOrderTools, PendingOrderTools, address
from envlab.envs.tau.tools import DomainTools

RETAIL_SCHEMA = Schema(
    tables=("users", "orders", "products"),
    indexes={"users": ("email", "address.zip")},
)
"""Users are found by email and by name + zip: both lookups go through an index."""

"""The largest integer (in bits) an expression may reach: ``9**9**9`` is refused at once, where
τ-bench computes for minutes to answer that the result is too large for a float."""


class RetailTools(DomainTools, CommonTools, PendingOrderTools, DeliveredOrderTools):
    """The 16 tools of τ-bench's retail agent over the episode's ``db`` (``RETAIL_SCHEMA``)."""

    @tool
    def find_user_id_by_email(self, email: str) -> str:
        """Find user id by email. If the user is not found, the function will return an error
        message.

        Args:
            email: The email of the user, such as 'something@example.com'.
        """
        # τ-bench compares lowercased emails; every stored email is lowercase (no tool changes
        # one), so the indexed equality with the lowercased query is the same test.
        row = self.db.conn.execute(
            "SELECT id FROM users WHERE json_extract(doc, '$.email') = ? ORDER BY rowid LIMIT 1",
            (email.lower(),),
        ).fetchone()
        if row is None:
            raise ToolCallError("user not found")
        return str(row[0])

    @tool
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find user id by first name, last name, and zip code. If the user is not found, the
        function will return an error message. By default, find user id by email, and only call
        this function if the user is not found by email or cannot remember email.

        Args:
            first_name: The first name of the customer, such as 'John'.
            last_name: The last name of the customer, such as 'Doe'.
            zip: The zip code of the customer, such as '12345'.
        """
        rows = self.db.conn.execute(
            "SELECT id, json_extract(doc, '$.name.first_name'), json_extract(doc, "
            "'$.name.last_name') FROM users WHERE json_extract(doc, '$.address.zip') = ? "
            "ORDER BY rowid",
            (zip,),
        )
        for user_id, first, last in rows:
            if first.lower() == first_name.lower() and last.lower() == last_name.lower():
                return str(user_id)
        raise ToolCallError("user not found")

    @tool
    def get_user_details(self, user_id: str) -> str:
        """Get the details of a user, including their orders.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return json.dumps(self._record("users", user_id, "user"))

    @tool
    def get_order_details(self, order_id: str) -> str:
        """Get the status and details of an order.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
        """
        return json.dumps(self._record("orders", order_id, "order"))

    @tool
    def get_product_details(self, product_id: str) -> str:
        """Get the inventory details of a product.

        Args:
            product_id: The product id, such as '6086499569'. Be careful the product id is
                different from the item id.
        """
        return json.dumps(self._record("products", product_id, "product"))

    @tool
    def list_all_product_types(self) -> str:
        """List the name and product id of all product types. Each product type has a variety of
        different items with unique item ids and options. There are only 50 product types in the
        store."""
        rows = self.db.conn.execute(
            "SELECT json_extract(doc, '$.name'), json_extract(doc, '$.product_id') "
            "FROM products ORDER BY rowid"
        )
        names = dict(rows.fetchall())  # in data order: a later product of a name wins
        return json.dumps(dict(sorted(names.items())))

    @tool(writes=True)
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
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

    @tool
    def think(self, thought: str) -> str:
        """Use the tool to think about something. It will not obtain new information or change the
        database, but just append the thought to the log. Use it when complex reasoning or some
        cache memory is needed.

        Args:
            thought: A thought to think about.
        """
        return ""

    def _record(self, table: str, key: str, noun: str) -> Record:
        record = self.db.get(table, key)
        if record is None:
            raise ToolCallError(f"{noun} not found")
        return record
