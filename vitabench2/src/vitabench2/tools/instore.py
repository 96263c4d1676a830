"""In-store toolkit: shop/product search, product orders, table bookings (deposit) and reservations.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/domains/instore/tools.py` (`InStoreTools`). 16 in-store tools. As there:
product orders neither check nor reserve stock; a booking needs `enable_book` and starts `paid` when the shop's
`book_price` is 0; a reservation checks neither `enable_reservation` nor that the time lies in the future, and
starts `unconsumed`.
"""

from .base import SEARCH_TOP_K, BaseTools, ToolError, check_time
from .models import render, render_order


class InStoreTools(BaseTools):
    """The 16 in-store tools."""

    INSTORE_TOOLS = (
        "instore_shop_search_recommend",
        "instore_product_search_recommend",
        "create_instore_product_order",
        "pay_instore_order",
        "instore_cancel_order",
        "instore_book",
        "pay_instore_book",
        "instore_cancel_book",
        "instore_reservation",
        "instore_modify_reservation",
        "instore_cancel_reservation",
        "get_instore_orders",
        "get_instore_reservations",
        "get_instore_books",
        "search_instore_book",
        "search_instore_reservation",
    )

    def _shop(self, shop_id: str) -> dict:
        return self._entity("shops", shop_id, "Shop")

    def _record(self, key: str, item_id: str) -> dict:
        item = self.state[key].get(item_id)
        if item is None:
            raise ToolError(f"{'BookInfo' if key == 'books' else 'ReservationInfo'} {item_id} not found")
        return item

    def _owned(self, key: str, user_id: str, item_id: str | None) -> str:
        self._check_user(user_id)
        model = "BookInfo" if key == "books" else "ReservationInfo"
        if item_id is not None:
            item = self._record(key, item_id)
            if item.get("customer_id") != str(user_id):
                return f"{model} {item_id} is not belong to user {user_id}."  # the official wording
            return render(model, item)
        found = [r for r in self.state[key].values() if r.get("customer_id") == str(user_id)]
        return (
            "\n".join(render(model, r) for r in found) if found else f"User {user_id} has no {key[:-1]} information."
        )

    def instore_shop_search_recommend(self, keywords: list[str]) -> str:
        """Shops ranked by fuzzy match of the keywords to shop name and tags (best 100)."""
        docs = {
            sid: s.get("shop_name", "") + "," + ",".join(s.get("tags", []))
            for sid, s in self._entities("shops").items()
        }
        ranked = self._rank("".join(keywords), docs)[:SEARCH_TOP_K]
        return "\n".join(render("Shop", self._entities("shops")[sid]) for sid, _ in ranked)

    def instore_product_search_recommend(self, keywords: list[str]) -> str:
        """Products ranked by fuzzy match of the keywords to product name and tags (best 100)."""
        products = {
            str(p.get("product_id", "")).strip(): p
            for shop in self._entities("shops").values()
            for p in shop.get("products", [])
        }
        docs = {pid: p.get("name", "") + "," + ",".join(p.get("tags", [])) for pid, p in products.items()}
        ranked = self._rank("".join(keywords), docs)[:SEARCH_TOP_K]
        return "\n".join(render("ShopProduct", products[pid]) for pid, _ in ranked)

    def create_instore_product_order(self, user_id: str, shop_id: str, product_id: str, quantity: int = 1) -> str:
        """Buy an in-store product (voucher, set meal); creates an unpaid order."""
        self._check_user(user_id)
        shop = self._shop(shop_id)
        product = next(
            (p for p in shop.get("products", []) if str(p.get("product_id", "")).strip() == str(product_id).strip()),
            None,
        )
        if product is None:
            raise ToolError(f"Product {product_id!r} does not exist in shop {shop_id}")
        if int(quantity) <= 0:
            raise ToolError("Quantity must be greater than 0")
        order_id = self._new_id("I")
        self.state["orders"][order_id] = order = {
            "order_id": order_id,
            "order_type": "instore",
            "user_id": str(user_id),
            "store_id": shop_id,
            "total_price": int(quantity) * float(product["price"]),
            "create_time": self.now,
            "update_time": self.now,
            "status": "unpaid",
            "products": [{**product, "quantity": int(quantity)}],
        }
        return render_order(order)

    def pay_instore_order(self, order_id: str) -> str:
        """Pay an unpaid in-store order."""
        return self._pay(self._order(order_id, "instore"), f"Order {order_id} is not in `unpaid` status.")

    def instore_cancel_order(self, order_id: str) -> str:
        """Cancel an in-store order."""
        order = self._order(order_id, "instore")
        if order["status"] == "cancelled":
            return f"Order {order_id} is already cancelled."
        order["status"], order["update_time"] = "cancelled", self.now
        return f"Order {order_id} is cancelled."

    def instore_book(self, user_id: str, shop_id: str, time: str, customer_count: int = 1) -> str:
        """Book a table at a shop that supports booking; a deposit (book_price) is paid separately if non-zero."""
        self._check_user(user_id)
        shop = self._shop(shop_id)
        if int(customer_count) <= 0:
            raise ToolError("Number of customers for table booking must be greater than 0")
        check_time(time)
        if not shop.get("enable_book", False):
            raise ToolError("Shop does not support table booking")
        price = shop.get("book_price", 0) or 0
        book_id = self._new_id("B")
        self.state["books"][book_id] = book = {
            "book_id": book_id,
            "shop_id": shop_id,
            "book_time": time,
            "customer_count": int(customer_count),
            "book_price": price,
            "customer_id": str(user_id),
            "status": "unpaid" if price > 0 else "paid",
            "update_time": self.now,
        }
        return render("BookInfo", book)

    def pay_instore_book(self, book_id: str) -> str:
        """Pay the deposit of a booking."""
        book = self._record("books", book_id)
        if book["status"] != "unpaid":
            return f"BookInfo {book_id} is not in `unpaid` status."
        book["status"], book["update_time"] = "paid", self.now
        return "Payment successful"

    def instore_cancel_book(self, book_id: str) -> str:
        """Cancel a booking."""
        book = self._record("books", book_id)
        if book["status"] == "cancelled":
            return f"BookInfo {book_id} is already cancelled."
        book["status"], book["update_time"] = "cancelled", self.now
        return f"BookInfo {book_id} is cancelled."

    def instore_reservation(self, user_id: str, shop_id: str, time: str, customer_count: int = 1) -> str:
        """Reserve a time slot at a shop (free)."""
        self._check_user(user_id)
        self._shop(shop_id)
        check_time(time)
        if int(customer_count) <= 0:
            raise ToolError("Number of customers for reservation must be greater than 0")
        rid = self._new_id("R")
        self.state["reservations"][rid] = res = {
            "reservation_id": rid,
            "shop_id": shop_id,
            "reservation_time": time,
            "customer_id": str(user_id),
            "customer_count": int(customer_count),
            "status": "unconsumed",
            "update_time": self.now,
        }
        return render("ReservationInfo", res)

    def instore_modify_reservation(self, reservation_id: str, time: str, customer_count: int = 0) -> str:
        """Change the time and party size of a reservation (the official tool sets the count it is given)."""
        res = self._record("reservations", reservation_id)
        if res["status"] in ("consumed", "cancelled"):
            return f"ReservationInfo {reservation_id} is already {res['status']}."
        if int(customer_count) < 0:
            raise ToolError("Number of customers for reservation must be greater than or equal to 0")
        check_time(time)
        res["reservation_time"], res["customer_count"], res["update_time"] = time, int(customer_count), self.now
        return render("ReservationInfo", res)

    def instore_cancel_reservation(self, reservation_id: str) -> str:
        """Cancel a reservation."""
        res = self._record("reservations", reservation_id)
        if res["status"] == "cancelled":
            return f"ReservationInfo {reservation_id} is already cancelled."
        res["status"], res["update_time"] = "cancelled", self.now
        return f"ReservationInfo {reservation_id} is cancelled."

    def get_instore_orders(self, user_id: str) -> str:
        """All in-store product orders of a user."""
        self._check_user(user_id)
        found = [
            o
            for o in self.state["orders"].values()
            if o.get("order_type") == "instore" and o.get("user_id") == str(user_id)
        ]
        return "\n".join(map(render_order, found)) if found else f"User {user_id} has no order information."

    def get_instore_reservations(self, user_id: str) -> str:
        """All reservations of a user."""
        return self._owned("reservations", user_id, None)

    def get_instore_books(self, user_id: str) -> str:
        """All bookings of a user."""
        return self._owned("books", user_id, None)

    def search_instore_book(self, user_id: str, book_id: str | None = None) -> str:
        """Bookings of a user, or one booking by id."""
        return self._owned("books", user_id, book_id)

    def search_instore_reservation(self, user_id: str, reservation_id: str | None = None) -> str:
        """Reservations of a user, or one reservation by id."""
        return self._owned("reservations", user_id, reservation_id)
