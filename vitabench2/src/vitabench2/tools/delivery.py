"""Delivery toolkit: store/product search and info, create/pay/cancel/modify orders, order queries.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/domains/delivery/tools.py` (`DeliveryTools`). 12 delivery tools.
"""

from datetime import timedelta

from .base import SEARCH_TOP_K, TIME_FORMAT, BaseTools, ToolError, check_time, haversine_m
from .models import render, render_order


class DeliveryTools(BaseTools):
    """The 12 delivery tools."""

    DELIVERY_TOOLS = (
        "delivery_distance_to_time",
        "get_delivery_store_info",
        "get_delivery_product_info",
        "delivery_store_search_recommand",
        "delivery_product_search_recommand",
        "create_delivery_order",
        "pay_delivery_order",
        "get_delivery_order_status",
        "cancel_delivery_order",
        "modify_delivery_order",
        "search_delivery_orders",
        "get_delivery_order_detail",
    )

    def _store(self, store_id: str) -> dict:
        return self._entity("stores", store_id, "Store")

    def _store_product(self, product_id: str) -> dict:
        # Official `_get_store_product`: the product is looked up across every store of the environment.
        for store in self._entities("stores").values():
            for p in store.get("products", []):
                if str(p.get("product_id", "")).strip() == str(product_id).strip():
                    return p
        raise ToolError(f"{product_id} not found")

    def delivery_distance_to_time(self, distance: float) -> str:
        """Delivery time in minutes for a distance in metres (official formula 25 + 0.00651 * distance)."""
        return str(round(25.0 + int(float(distance)) * 0.006510, 0))

    def get_delivery_store_info(self, store_id: str) -> str:
        """Details of a delivery store, including its products."""
        return render("Store", self._store(store_id), products=True)

    def get_delivery_product_info(self, product_id: str) -> str:
        """Details of a delivery product."""
        return render("StoreProduct", self._store_product(product_id))

    def delivery_store_search_recommand(self, keywords: list[str]) -> str:
        """Stores ranked by fuzzy match of the keywords to store name and tags (best 100)."""
        # Official document: name immediately followed by the comma-joined tags; the query is the joined keywords.
        docs = {sid: s.get("name", "") + ",".join(s.get("tags", [])) for sid, s in self._entities("stores").items()}
        ranked = self._rank("".join(keywords), docs)[:SEARCH_TOP_K]
        return "\n".join(render("Store", self._entities("stores")[sid]) for sid, _ in ranked)

    def delivery_product_search_recommand(self, keywords: list[str]) -> str:
        """Products ranked by fuzzy match of the keywords to store name, product name and tags (best 100)."""
        products = {
            str(p.get("product_id", "")).strip(): p
            for store in self._entities("stores").values()
            for p in store.get("products", [])
        }
        docs = {
            pid: f"{p.get('store_name', '')} {p.get('name', '')} {p.get('tags', [])}" for pid, p in products.items()
        }
        ranked = self._rank("".join(keywords), docs)[:SEARCH_TOP_K]
        return "\n".join(render("StoreProduct", products[pid]) for pid, _ in ranked)

    def create_delivery_order(
        self,
        user_id: str,
        store_id: str,
        product_ids: list[str],
        product_cnts: list[int],
        address: str,
        dispatch_time: str,
        attributes: list[str] | None = None,
        note: str = "",
    ) -> str:
        """Create an unpaid delivery order; the delivery time is dispatch time plus the distance-based travel time."""
        self._check_user(user_id)
        store = self._store(store_id)
        products = [self._store_product(pid) for pid in product_ids]
        if not address:
            raise ToolError(f"Location {address!r} is empty")
        if len(product_ids) != len(product_cnts) or not all(int(c) > 0 for c in product_cnts):
            raise ToolError(f"product_cnts {product_cnts} list is invalid")
        dispatch = check_time(dispatch_time)
        if dispatch < check_time(self.now):
            raise ToolError(f"dispatch_time {dispatch_time} must be in the future (now is {self.now})")
        # Official: the address must resolve to known coordinates; an unknown address is an error.
        loc = self._locate(address)
        if loc is None:
            raise ToolError(f"Longitude and latitude not found for address {address}")
        s_loc = store.get("location") or {}
        distance = haversine_m(loc["longitude"], loc["latitude"], s_loc["longitude"], s_loc["latitude"])
        minutes = float(self.delivery_distance_to_time(distance))
        attrs = [a or "" for a in (attributes or [])[: len(products)]]
        attrs += [""] * (len(products) - len(attrs))
        items = [
            {
                "product_id": p.get("product_id"),
                "name": p.get("name"),
                "store_id": p.get("store_id"),
                "store_name": p.get("store_name"),
                "price": p["price"],
                "quantity": int(cnt),
                "attributes": attr,
                "tags": p.get("tags", []),
            }
            for p, cnt, attr in zip(products, product_cnts, attrs)
        ]
        order_id = self._new_id("D")
        self.state["orders"][order_id] = order = {
            "order_id": order_id,
            "order_type": "delivery",
            "user_id": str(user_id),
            "store_id": store_id,
            "location": {"address": address, "longitude": loc["longitude"], "latitude": loc["latitude"]},
            "dispatch_time": dispatch_time,
            "shipping_time": minutes,
            "delivery_time": (dispatch + timedelta(minutes=minutes)).strftime(TIME_FORMAT),
            "total_price": sum(float(p["price"]) * int(c) for p, c in zip(products, product_cnts)),
            "create_time": self.now,
            "update_time": self.now,
            "note": note,
            "products": items,
            "status": "unpaid",
        }
        return render_order(order)

    def pay_delivery_order(self, order_id: str) -> str:
        """Pay an unpaid delivery order."""
        return self._pay(self._order(order_id, "delivery"), "Order is not in `unpaid` status.")

    def get_delivery_order_status(self, order_id: str) -> str:
        """Status of a delivery order."""
        return self._order(order_id, "delivery")["status"]

    def cancel_delivery_order(self, order_id: str) -> str:
        """Cancel a delivery order."""
        order = self._order(order_id, "delivery")
        if order["status"] == "cancelled":
            raise ToolError(f"Order {order_id} is already cancelled")
        order["status"] = "cancelled"
        return f"Order {order_id} has been cancelled."

    def modify_delivery_order(self, order_id: str, note: str) -> str:
        """Change the note of a delivery order."""
        self._order(order_id, "delivery")["note"] = note
        return f"Order {order_id} has been modified."

    def search_delivery_orders(self, user_id: str, status: str = "unpaid") -> str:
        """Delivery orders of a user with a given status (unpaid, paid, cancelled, ...)."""
        self._check_user(user_id)
        found = [
            o
            for o in self.state["orders"].values()
            if o.get("order_type") == "delivery" and o.get("user_id") == str(user_id) and o.get("status") == status
        ]
        return "\n".join(render_order(o, products=False) for o in found) if found else "No delivery orders available"

    def get_delivery_order_detail(self, order_id: str) -> str:
        """Full details of a delivery order."""
        return render_order(self._order(order_id, "delivery"))
