"""The retail tools that change orders: mixins of ``RetailTools`` (``envlab.envs.tau.retail``).

Each does what τ-bench's tool of the same name does, check by check and write by write, on the
arguments as sent (``envs/tau/tools.py``: ``item_ids`` may be any value τ-bench's loops and
``sorted`` take, an empty string included): a refused call (``ToolCallError``, read by the agent
as ``Error: ...``) changes nothing.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field

from envlab.core import ToolCallError
from envlab.envs.tau.db import Database, Record
from envlab.envs.tau.tools import Sent, Text, TextList, tau_tool

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
CancelReason = Annotated[
    Any, Sent(Annotated[str, Field(json_schema_extra={"enum": list(CANCEL_REASONS)})])
]
"""An enum in the schema that the tool checks itself: τ-bench answers another reason with
``Error: invalid reason``, after checking the order."""


def address(address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any) -> Record:
    """An address record, its keys in τ-bench's order, its fields as sent."""
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


class _OrderAccess:
    db: Database

    def _order(self, order_id: Any, status: str, action: str) -> Record:
        """The order ``order_id``, refused unless its status is ``status``."""
        order = self.db.get("orders", order_id)
        if order is None:
            raise ToolCallError("order not found")
        if order["status"] != status:
            raise ToolCallError(f"non-{status} order cannot be {action}")
        return order

    def _user(self, order: Record) -> Record:
        user = self.db.get("users", order["user_id"])
        assert user is not None, f"order {order['order_id']} of an unknown user"
        return user

    def _payment_method(self, user: Record, payment_method_id: Any) -> dict[str, Any]:
        if payment_method_id not in user["payment_methods"]:
            raise ToolCallError("payment method not found")
        return user["payment_methods"][payment_method_id]  # type: ignore[no-any-return]

    def _price_difference(self, order: Record, item_ids: Any, new_item_ids: Any) -> Any:
        """New minus old prices of the items swapped, summed in order (not rounded: an int 0
        when nothing is swapped), after τ-bench's checks of the items."""
        held = [item["item_id"] for item in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > held.count(item_id):
                raise ToolCallError(f"{item_id} not found")
        if len(item_ids) != len(new_item_ids):
            raise ToolCallError("the number of items to be exchanged should match")
        diff_price: Any = 0
        for item_id, new_item_id in zip(item_ids, new_item_ids):  # noqa: B905 (τ-bench's zip)
            # τ-bench's `[...][0]` (an IndexError, were it ever empty)
            item = [item for item in order["items"] if item["item_id"] == item_id][0]  # noqa: RUF015
            variant = self._variant(item["product_id"], new_item_id)
            if variant is None or not variant["available"]:
                raise ToolCallError(f"new item {new_item_id} not found or available")
            diff_price += variant["price"] - item["price"]
        return diff_price

    def _variant(self, product_id: str, item_id: Any) -> dict[str, Any] | None:
        product = self.db.get("products", product_id)
        assert product is not None, f"an order holds an item of the unknown product {product_id}"
        return product["variants"].get(item_id)  # type: ignore[no-any-return]


class PendingOrderTools(_OrderAccess):
    """Cancel a pending order, or change its address, items or payment."""

    @tau_tool(writes=True)
    def cancel_pending_order(self, order_id: Text, reason: CancelReason) -> str:
        """Cancel a pending order. If the order is already processed or delivered, it cannot be
        cancelled. The agent needs to explain the cancellation detail and ask for explicit user
        confirmation (yes/no) to proceed. If the user confirms, the order status will be changed
        to 'cancelled' and the payment will be refunded. The refund will be added to the user's
        gift card balance immediately if the payment was made using a gift card, otherwise the
        refund would take 5-7 business days to process. The function returns the order details
        after the cancellation.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            reason: The reason for cancellation, which should be either 'no longer needed' or
                'ordered by mistake'.
        """
        order = self._order(order_id, "pending", "cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolCallError("invalid reason")
        refunds: list[dict[str, Any]] = []
        user: Record | None = None
        for payment in order["payment_history"]:  # every entry, refunds included, as τ-bench
            payment_id = payment["payment_method_id"]
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": payment_id,
                }
            )
            if "gift_card" in payment_id:  # refunded to the gift card at once
                if user is None:
                    user = self._user(order)
                method = user["payment_methods"][payment_id]
                method["balance"] += payment["amount"]
                method["balance"] = round(method["balance"], 2)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        if user is not None:
            self.db.put("users", order["user_id"], user)
        self.db.put("orders", order_id, order)
        return json.dumps(order)

    @tau_tool(writes=True)
    def modify_pending_order_address(
        self,
        order_id: Text,
        address1: Text,
        address2: Text,
        city: Text,
        state: Text,
        country: Text,
        zip: Text,
    ) -> str:
        """Modify the shipping address of a pending order. The agent needs to explain the
        modification detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            address1: The first line of the address, such as '123 Main St'.
            address2: The second line of the address, such as 'Apt 1' or ''.
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        order = self._order(order_id, "pending", "modified")
        order["address"] = address(address1, address2, city, state, country, zip)
        self.db.put("orders", order_id, order)
        return json.dumps(order)

    @tau_tool(writes=True)
    def modify_pending_order_items(
        self, order_id: Text, item_ids: TextList, new_item_ids: TextList, payment_method_id: Text
    ) -> str:
        """Modify items in a pending order to new items of the same product type. For a pending
        order, this function can only be called once. The agent needs to explain the exchange
        detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            item_ids: The item ids to be modified, each such as '1008292230'. There could be
                duplicate items in the list.
            new_item_ids: The item ids to be modified for, each such as '1008292230'. There could
                be duplicate items in the list. Each new item id should match the item id in the
                same position and be of the same product.
            payment_method_id: The payment method id to pay or receive refund for the item price
                difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be
                looked up from the user or order details.
        """
        order = self._order(order_id, "pending", "modified")
        diff_price = self._price_difference(order, item_ids, new_item_ids)
        user = self._user(order)
        method = self._payment_method(user, payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff_price:
            raise ToolCallError("insufficient gift card balance to pay for the new item")
        order["payment_history"].append(
            {
                "transaction_type": "payment" if diff_price > 0 else "refund",
                "amount": abs(diff_price),
                "payment_method_id": payment_method_id,
            }
        )
        if method["source"] == "gift_card":
            method["balance"] -= diff_price
            method["balance"] = round(method["balance"], 2)
            self.db.put("users", order["user_id"], user)
        for item_id, new_item_id in zip(item_ids, new_item_ids):  # noqa: B905 (τ-bench's zip)
            # looked up again each time: an item swapped earlier in the loop can match
            # τ-bench's `[...][0]` (an IndexError, were it ever empty)
            item = [item for item in order["items"] if item["item_id"] == item_id][0]  # noqa: RUF015
            variant = self._variant(item["product_id"], new_item_id)
            assert variant is not None
            item["item_id"] = new_item_id
            item["price"] = variant["price"]
            item["options"] = variant["options"]
        order["status"] = "pending (item modified)"
        self.db.put("orders", order_id, order)
        return json.dumps(order)

    @tau_tool(writes=True)
    def modify_pending_order_payment(self, order_id: Text, payment_method_id: Text) -> str:
        """Modify the payment method of a pending order. The agent needs to explain the
        modification detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            payment_method_id: The payment method id to pay or receive refund for the item price
                difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be
                looked up from the user or order details.
        """
        order = self._order(order_id, "pending", "modified")
        user = self._user(order)
        method = self._payment_method(user, payment_method_id)
        history = order["payment_history"]
        if len(history) > 1 or history[0]["transaction_type"] != "payment":
            raise ToolCallError("there should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolCallError("the new payment method should be different from the current one")
        amount = history[0]["amount"]
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolCallError("insufficient gift card balance to pay for the order")
        history.extend(
            [
                {
                    "transaction_type": "payment",
                    "amount": amount,
                    "payment_method_id": payment_method_id,
                },
                {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
            ]
        )
        if method["source"] == "gift_card":
            method["balance"] -= amount
            method["balance"] = round(method["balance"], 2)
        if "gift_card" in old_id:
            old_method = user["payment_methods"][old_id]
            old_method["balance"] += amount
            old_method["balance"] = round(old_method["balance"], 2)
        if method["source"] == "gift_card" or "gift_card" in old_id:
            self.db.put("users", order["user_id"], user)
        self.db.put("orders", order_id, order)
        return json.dumps(order)


class DeliveredOrderTools(_OrderAccess):
    """Return or exchange items of a delivered order."""

    @tau_tool(writes=True)
    def exchange_delivered_order_items(
        self, order_id: Text, item_ids: TextList, new_item_ids: TextList, payment_method_id: Text
    ) -> str:
        """Exchange items in a delivered order to new items of the same product type. For a
        delivered order, return or exchange can be only done once by the agent. The agent needs
        to explain the exchange detail and ask for explicit user confirmation (yes/no) to proceed.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            item_ids: The item ids to be exchanged, each such as '1008292230'. There could be
                duplicate items in the list.
            new_item_ids: The item ids to be exchanged for, each such as '1008292230'. There
                could be duplicate items in the list. Each new item id should match the item id
                in the same position and be of the same product.
            payment_method_id: The payment method id to pay or receive refund for the item price
                difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be
                looked up from the user or order details.
        """
        order = self._order(order_id, "delivered", "exchanged")
        diff_price = round(self._price_difference(order, item_ids, new_item_ids), 2)
        method = self._payment_method(self._user(order), payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff_price:
            raise ToolCallError("insufficient gift card balance to pay for the price difference")
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = diff_price
        self.db.put("orders", order_id, order)
        return json.dumps(order)

    @tau_tool(writes=True)
    def return_delivered_order_items(
        self, order_id: Text, item_ids: TextList, payment_method_id: Text
    ) -> str:
        """Return some items of a delivered order. The order status will be changed to 'return
        requested'. The agent needs to explain the return detail and ask for explicit user
        confirmation (yes/no) to proceed. The user will receive follow-up email for how and
        where to return the item.

        Args:
            order_id: The order id, such as '#W0000000'. Be careful there is a '#' symbol at the
                beginning of the order id.
            item_ids: The item ids to be returned, each such as '1008292230'. There could be
                duplicate items in the list.
            payment_method_id: The payment method id to pay or receive refund for the item price
                difference, such as 'gift_card_0000000' or 'credit_card_0000000'. These can be
                looked up from the user or order details.
        """
        order = self._order(order_id, "delivered", "returned")
        self._payment_method(self._user(order), payment_method_id)
        if (
            "gift_card" not in payment_method_id
            and payment_method_id != order["payment_history"][0]["payment_method_id"]
        ):
            raise ToolCallError(
                "payment method should be either the original payment method or a gift card"
            )
        held = [item["item_id"] for item in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > held.count(item_id):
                raise ToolCallError("some item not found")
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        self.db.put("orders", order_id, order)
        return json.dumps(order)
