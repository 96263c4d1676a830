"""Domain environments and tools: delivery, in-store and OTA (travel), plus the general tools.

Paper spec sec. 6.1 (tool names and READ/WRITE/GENERIC split of the official `vita` toolkits; our own code). Each
subtask gets a fresh `Environment` built from its `environment` dict; WRITE tools change `Environment.state`
(orders, reservations, books, stock), which the outcome check and the tests read back.
"""

import copy
import inspect
import json
import math
from datetime import datetime, timedelta


TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# Official base toolkit leaves `get_user_historical_behaviors` commented out in 2.0: it leaks ground truth (sec. 6.1).
HIDDEN_KEYS = ("distraction_reason",)
# Label values of `*_type` fields that are hidden from the agent and the judge (sec. 2.1).
HIDDEN_LABELS = ("target", "distraction")
# Small public-holiday calendar (mainland China, 2025-2026) for the two holiday tools.
HOLIDAYS = {
    "2025": {
        "New Year's Day": ("2025-01-01", "2025-01-01"),
        "Spring Festival": ("2025-01-28", "2025-02-04"),
        "Qingming Festival": ("2025-04-04", "2025-04-06"),
        "Labour Day": ("2025-05-01", "2025-05-05"),
        "Dragon Boat Festival": ("2025-05-31", "2025-06-02"),
        "National Day": ("2025-10-01", "2025-10-08"),
    },
    "2026": {
        "New Year's Day": ("2026-01-01", "2026-01-03"),
        "Spring Festival": ("2026-02-15", "2026-02-23"),
        "Qingming Festival": ("2026-04-04", "2026-04-06"),
        "Labour Day": ("2026-05-01", "2026-05-05"),
        "Dragon Boat Festival": ("2026-06-19", "2026-06-21"),
        "National Day": ("2026-10-01", "2026-10-07"),
    },
}
# OTA entity kind -> (environment key, id field, name field).
OTA_KINDS = {
    "hotel": ("hotels", "hotel_id", "hotel_name"),
    "attraction": ("attractions", "attraction_id", "attraction_name"),
    "flight": ("flights", "flight_id", "flight_number"),
    "train": ("trains", "train_id", "train_number"),
    "taxi": ("taxis", "taxi_id", "platform"),
}


class ToolError(ValueError):
    """A tool call failed (bad id, bad argument, wrong state); returned to the agent as an error message."""


def sanitize(obj):
    """Deep copy without the hidden labels (`*_type` = target/distraction, `distraction_reason`)."""
    if isinstance(obj, dict):
        return {
            k: sanitize(v)
            for k, v in obj.items()
            if k not in HIDDEN_KEYS and not (k.endswith("_type") and v in HIDDEN_LABELS)
        }
    if isinstance(obj, list):
        return [sanitize(v) for v in obj]
    return obj


def haversine_m(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    """Great-circle distance in metres."""
    r = 6371000.0
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(a))


def _match(text: str, keyword: str) -> bool:
    return keyword.strip().lower() in str(text).lower()


def _dump(obj) -> str:
    return json.dumps(sanitize(obj), ensure_ascii=False)


class Environment:
    """The tools of one subtask's environment.

    Args:
        environment (`dict`): the subtask's `environment` (deep-copied; the task is never mutated).
        domains (`list[str]`): which domain toolkits to expose (`delivery`, `instore`, `ota`); general tools always.
    """

    def __init__(self, environment: dict, domains: list[str]):
        for d in domains:
            if d not in DOMAIN_TOOLS:
                raise ValueError(f"Unknown domain {d!r}; valid: {sorted(DOMAIN_TOOLS)}")
        self.state = copy.deepcopy(environment)
        for key in ("orders", "reservations", "books"):
            if not isinstance(self.state.get(key), dict):
                self.state[key] = {}
        self.domains = list(domains)
        self.user_id = str(self.state.get("user_id", ""))
        self._counter = 0
        funcs = list(GENERAL_TOOLS)
        for d in domains:
            funcs += [f for f in DOMAIN_TOOLS[d] if f not in funcs]
        self.tools = {f.__name__: f for f in funcs}

    # ------------------------------------------------------------------ plumbing
    def call(self, name: str, arguments: dict) -> str:
        """Run tool `name`; unknown names and bad arguments raise `ToolError` listing what is valid."""
        if name not in self.tools:
            raise ToolError(f"Unknown tool {name!r}; valid tools: {sorted(self.tools)}")
        func = self.tools[name]
        params = inspect.signature(func).parameters
        unknown = [k for k in arguments if k not in params or k == "self"]
        if unknown:
            raise ToolError(
                f"Tool {name} got unknown arguments {unknown}; valid: {[p for p in params if p != 'self']}"
            )
        try:
            result = func(self, **arguments)
        except TypeError as err:
            raise ToolError(f"Bad arguments for {name}: {err}") from None
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def tool_schemas(self) -> list[dict]:
        """OpenAI function-calling schemas of the exposed tools."""
        return [tool_schema(f) for f in self.tools.values()]

    @property
    def now(self) -> str:
        return str(self.state.get("time", "2025-01-01 12:00:00"))

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter:04d}"

    def _entities(self, key: str) -> dict:
        value = self.state.get(key) or {}
        return value if isinstance(value, dict) else {str(i): v for i, v in enumerate(value)}

    def _user_location(self) -> dict | None:
        locs = self.state.get("location") or []
        return locs[0] if isinstance(locs, list) and locs else (locs if isinstance(locs, dict) else None)

    def _check_user(self, user_id: str) -> None:
        if self.user_id and str(user_id) != self.user_id:
            raise ToolError(f"User {user_id!r} not found; check the user id with the user")

    def _order(self, order_id: str, order_type: str | None = None) -> dict:
        order = self.state["orders"].get(order_id)
        if order is None or (order_type is not None and order.get("order_type") != order_type):
            raise ToolError(f"Order {order_id!r} not found" + (f" among {order_type} orders" if order_type else ""))
        return order

    def _pay(self, order: dict) -> str:
        if order["status"] != "unpaid":
            raise ToolError(f"Order {order['order_id']} cannot be paid: status is {order['status']}")
        order["status"] = "paid"
        order["update_time"] = self.now
        return f"Order {order['order_id']} paid successfully."

    def _cancel(self, order: dict, user_id: str | None = None) -> str:
        if user_id is not None and order.get("user_id") != str(user_id):
            raise ToolError(f"Order {order['order_id']} does not belong to user {user_id}")
        if order["status"] in ("cancelled", "delivered", "completed"):
            raise ToolError(f"Order {order['order_id']} cannot be cancelled: status is {order['status']}")
        order["status"] = "cancelled"
        order["update_time"] = self.now
        for item in order.get("products", []):  # return stock for the stock-tracked domains
            product = item.get("_ref")
            if product is not None and isinstance(product.get("quantity"), int):
                product["quantity"] += item["quantity"]
        return f"Order {order['order_id']} cancelled."

    def _locate(self, address: str) -> dict | None:
        """Known coordinates of an address: the user's locations, then every entity location."""
        candidates = list(self.state.get("location") or [])
        for key in ("stores", "shops", "hotels", "attractions"):
            candidates += [
                e.get("location") for e in self._entities(key).values() if isinstance(e.get("location"), dict)
            ]
        for loc in candidates:
            if loc and (_match(loc.get("address", ""), address) or _match(address, loc.get("address", "x" * 99))):
                return loc
        return None

    # ------------------------------------------------------------------ general tools
    def longitude_latitude_to_distance(
        self, longitude1: float, latitude1: float, longitude2: float, latitude2: float
    ) -> str:
        """Distance in metres between two (longitude, latitude) points."""
        return str(round(haversine_m(float(longitude1), float(latitude1), float(longitude2), float(latitude2)), 1))

    def weather(self, address: str, date_start: str, date_end: str) -> str:
        """Weather forecast for a city/address between two dates (YYYY-MM-DD)."""
        out = []
        for w in self.state.get("weather") or []:
            city = str(w.get("city", "")).replace(" City", "")
            if (_match(address, city) or _match(city, address)) and date_start <= str(
                w.get("datetime", "")
            ) <= date_end:
                out.append(w)
        return _dump(out) if out else "No weather information found for this address and dates."

    def address_to_longitude_latitude(self, address: str) -> str:
        """Longitude and latitude of a known address."""
        loc = self._locate(address)
        if loc is None:
            raise ToolError(f"Address {address!r} not found")
        return json.dumps([loc["longitude"], loc["latitude"]])

    def get_date_holiday_info(self, date: str) -> str:
        """Whether a date (YYYY-MM-DD) is a public holiday, weekend or workday."""
        try:
            day = datetime.strptime(date, "%Y-%m-%d")
        except ValueError:
            raise ToolError(f"Date {date!r} must be YYYY-MM-DD") from None
        for name, (start, end) in HOLIDAYS.get(date[:4], {}).items():
            if start <= date <= end:
                return f"{date} ({day:%A}) is a public holiday: {name}."
        kind = "weekend" if day.weekday() >= 5 else "workday"
        return f"{date} ({day:%A}) is a {kind}."

    def get_holiday_date(self, year: str, holiday_name: str) -> str:
        """Start and end date of a public holiday in a year."""
        for name, (start, end) in HOLIDAYS.get(str(year), {}).items():
            if _match(name, holiday_name):
                return f"{name} {year}: {start} to {end}"
        raise ToolError(f"Holiday {holiday_name!r} in {year} not found; known: {sorted(HOLIDAYS.get(str(year), {}))}")

    def get_user_all_orders(self) -> str:
        """All orders, reservations and books of the current user."""
        return _dump({k: list(v.values()) for k, v in self.public_state().items()})

    def get_nearby(self, longitude: float, latitude: float, range: float) -> str:  # noqa: A002 (official name)
        """Stores, shops, hotels and attractions within `range` metres of a point."""
        out = []
        for key, id_field, name_field in (
            ("stores", "store_id", "name"),
            ("shops", "shop_id", "shop_name"),
            ("hotels", "hotel_id", "hotel_name"),
            ("attractions", "attraction_id", "attraction_name"),
        ):
            for e in self._entities(key).values():
                loc = e.get("location") or {}
                if "longitude" in loc:
                    d = haversine_m(float(longitude), float(latitude), loc["longitude"], loc["latitude"])
                    if d <= float(range):
                        out.append({"id": e.get(id_field), "name": e.get(name_field), "distance_m": round(d)})
        return json.dumps(out, ensure_ascii=False)

    # ------------------------------------------------------------------ delivery
    def _store(self, store_id: str) -> dict:
        store = self._entities("stores").get(str(store_id).strip())
        if store is None:
            raise ToolError(f"Store {store_id!r} not found")
        return store

    def _store_product(self, product_id: str) -> tuple[dict, dict]:
        for store in self._entities("stores").values():
            for p in store.get("products", []):
                if p.get("product_id") == str(product_id).strip():
                    return store, p
        raise ToolError(f"Product {product_id!r} not found")

    def delivery_distance_to_time(self, distance: float) -> str:
        """Delivery time in minutes for a distance in metres (official formula 25 + 0.00651 * distance)."""
        return str(round(25.0 + int(float(distance)) * 0.006510, 0))

    def get_delivery_store_info(self, store_id: str) -> str:
        """Details of a delivery store, including its products."""
        return _dump(self._store(store_id))

    def get_delivery_product_info(self, product_id: str) -> str:
        """Details of a delivery product."""
        return _dump(self._store_product(product_id)[1])

    def delivery_store_search_recommand(self, keywords: list[str]) -> str:
        """Search delivery stores whose name, tags or products match any keyword."""
        out = []
        for store in self._entities("stores").values():
            texts = [store.get("name", ""), *store.get("tags", [])] + [
                p.get("name", "") for p in store.get("products", [])
            ]
            if any(_match(t, k) for k in keywords for t in texts):
                out.append({k: store.get(k) for k in ("store_id", "name", "score", "tags", "location")})
        return _dump(out) if out else "No stores found."

    def delivery_product_search_recommand(self, keywords: list[str]) -> str:
        """Search delivery products whose name or tags match any keyword."""
        out = []
        for store in self._entities("stores").values():
            for p in store.get("products", []):
                if any(_match(t, k) for k in keywords for t in [p.get("name", ""), *p.get("tags", [])]):
                    out.append(p)
        return _dump(out) if out else "No products found."

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
        if not product_ids or len(product_ids) != len(product_cnts):
            raise ToolError("product_ids and product_cnts must be non-empty lists of the same length")
        try:
            dispatch = datetime.strptime(dispatch_time, TIME_FORMAT)
        except ValueError:
            raise ToolError(f"dispatch_time {dispatch_time!r} must be formatted {TIME_FORMAT}") from None
        if dispatch < datetime.strptime(self.now, TIME_FORMAT):
            raise ToolError(f"dispatch_time {dispatch_time} must not be in the past (now is {self.now})")
        if not address:
            raise ToolError("address is empty")
        # Attributes are free text in the official toolkit (real tasks use values outside the listed options).
        attributes = list(attributes or []) + [""] * max(0, len(product_ids) - len(attributes or []))
        items, total = [], 0.0
        for pid, cnt, attr in zip(product_ids, product_cnts, attributes):
            # As the official toolkit: the product must exist (in any store; real task data relies on this).
            product = self._store_product(pid)[1]
            if int(cnt) <= 0:
                raise ToolError(f"Quantity of {pid} must be positive")
            items.append(
                {
                    "product_id": pid,
                    "name": product.get("name"),
                    "price": product["price"],
                    "quantity": int(cnt),
                    "attributes": attr,
                }
            )
            total += float(product["price"]) * int(cnt)
        loc = self._locate(address) or self._user_location()
        s_loc = store.get("location") or {}
        distance = (
            haversine_m(loc["longitude"], loc["latitude"], s_loc["longitude"], s_loc["latitude"])
            if loc and s_loc
            else 0.0
        )
        minutes = float(self.delivery_distance_to_time(distance))
        order_id = self._new_id("D")
        self.state["orders"][order_id] = {
            "order_id": order_id,
            "order_type": "delivery",
            "user_id": str(user_id),
            "store_id": store_id,
            "store_name": store.get("name"),
            "note": note,
            "location": {
                "address": address,
                **({"longitude": loc["longitude"], "latitude": loc["latitude"]} if loc else {}),
            },
            "dispatch_time": dispatch_time,
            "shipping_time": minutes,
            "delivery_time": (dispatch + timedelta(minutes=minutes)).strftime(TIME_FORMAT),
            "total_price": round(total, 2),
            "create_time": self.now,
            "update_time": self.now,
            "status": "unpaid",
            "products": items,
        }
        return f"Order created: {_dump(self.state['orders'][order_id])}"

    def pay_delivery_order(self, order_id: str) -> str:
        """Pay an unpaid delivery order."""
        return self._pay(self._order(order_id, "delivery"))

    def get_delivery_order_status(self, order_id: str) -> str:
        """Status of a delivery order."""
        return self._order(order_id, "delivery")["status"]

    def cancel_delivery_order(self, order_id: str) -> str:
        """Cancel a delivery order."""
        return self._cancel(self._order(order_id, "delivery"))

    def modify_delivery_order(self, order_id: str, note: str) -> str:
        """Change the note of a delivery order that has not been delivered or cancelled."""
        order = self._order(order_id, "delivery")
        if order["status"] in ("cancelled", "delivered"):
            raise ToolError(f"Order {order_id} cannot be modified: status is {order['status']}")
        order["note"], order["update_time"] = note, self.now
        return f"Order {order_id} note updated."

    def search_delivery_orders(self, user_id: str, status: str = "unpaid") -> str:
        """Delivery orders of a user with a given status (unpaid, paid, cancelled, delivered)."""
        orders = self.state["orders"].values()
        return _dump(
            [
                o
                for o in orders
                if o.get("order_type") == "delivery" and o.get("user_id") == str(user_id) and o.get("status") == status
            ]
        )

    def get_delivery_order_detail(self, order_id: str) -> str:
        """Full details of a delivery order."""
        return _dump(self._order(order_id, "delivery"))

    # ------------------------------------------------------------------ in-store
    def _shop(self, shop_id: str) -> dict:
        shop = self._entities("shops").get(str(shop_id).strip())
        if shop is None:
            raise ToolError(f"Shop {shop_id!r} not found")
        return shop

    def _slot(self, time: str) -> str:
        try:
            when = datetime.strptime(time, TIME_FORMAT)
        except ValueError:
            raise ToolError(f"time {time!r} must be formatted {TIME_FORMAT}") from None
        if when < datetime.strptime(self.now, TIME_FORMAT):
            raise ToolError(f"time {time} is in the past (now is {self.now})")
        return time

    def instore_shop_search_recommend(self, keywords: list[str]) -> str:
        """Search in-store shops whose name, tags, category or products match any keyword."""
        out = []
        for shop in self._entities("shops").values():
            texts = [shop.get("shop_name", ""), shop.get("category", ""), *shop.get("tags", [])]
            texts += [p.get("name", "") for p in shop.get("products", [])]
            if any(_match(t, k) for k in keywords for t in texts):
                out.append(shop)
        return _dump(out) if out else "No shops found."

    def instore_product_search_recommend(self, keywords: list[str]) -> str:
        """Search in-store products whose name or tags match any keyword."""
        out = [
            p
            for shop in self._entities("shops").values()
            for p in shop.get("products", [])
            if any(_match(t, k) for k in keywords for t in [p.get("name", ""), *p.get("tags", [])])
        ]
        return _dump(out) if out else "No products found."

    def create_instore_product_order(self, user_id: str, shop_id: str, product_id: str, quantity: int = 1) -> str:
        """Buy an in-store product (voucher, set meal); creates an unpaid order."""
        self._check_user(user_id)
        shop = self._shop(shop_id)
        product = next((p for p in shop.get("products", []) if p.get("product_id") == product_id), None)
        if product is None:
            raise ToolError(f"Product {product_id!r} is not sold by shop {shop_id}")
        quantity = int(quantity)
        if quantity <= 0:
            raise ToolError("quantity must be positive")
        # The official in-store toolkit does not check or reserve stock (real tasks order "sold-out" vouchers).
        order_id = self._new_id("I")
        self.state["orders"][order_id] = {
            "order_id": order_id,
            "order_type": "instore",
            "user_id": str(user_id),
            "store_id": shop_id,
            "store_name": shop.get("shop_name"),
            "total_price": round(float(product["price"]) * quantity, 2),
            "create_time": self.now,
            "update_time": self.now,
            "status": "unpaid",
            "products": [
                {
                    "product_id": product_id,
                    "name": product.get("name"),
                    "price": product["price"],
                    "quantity": quantity,
                }
            ],
        }
        return f"Order created: {_public_order(self.state['orders'][order_id])}"

    def pay_instore_order(self, order_id: str) -> str:
        """Pay an unpaid in-store order."""
        return self._pay(self._order(order_id, "instore"))

    def instore_cancel_order(self, order_id: str) -> str:
        """Cancel an in-store order."""
        return self._cancel(self._order(order_id, "instore"))

    def instore_book(self, user_id: str, shop_id: str, time: str, customer_count: int = 1) -> str:
        """Book (paid deposit) a shop that supports booking, for a time and number of people."""
        self._check_user(user_id)
        shop = self._shop(shop_id)
        if not shop.get("enable_book", False):
            raise ToolError(f"Shop {shop_id} does not support booking")
        book_id = self._new_id("B")
        self.state["books"][book_id] = {
            "book_id": book_id,
            "shop_id": shop_id,
            "book_time": self._slot(time),
            "customer_id": str(user_id),
            "customer_count": int(customer_count),
            "book_price": shop.get("book_price", 0),
            "status": "unpaid",
            "update_time": self.now,
        }
        return f"Booking created: {_dump(self.state['books'][book_id])}"

    def pay_instore_book(self, book_id: str) -> str:
        """Pay the deposit of a booking."""
        book = self._get("books", book_id)
        if book["status"] != "unpaid":
            raise ToolError(f"Booking {book_id} cannot be paid: status is {book['status']}")
        book["status"], book["update_time"] = "paid", self.now
        return f"Booking {book_id} paid."

    def instore_cancel_book(self, book_id: str) -> str:
        """Cancel a booking."""
        book = self._get("books", book_id)
        book["status"], book["update_time"] = "cancelled", self.now
        return f"Booking {book_id} cancelled."

    def instore_reservation(self, user_id: str, shop_id: str, time: str, customer_count: int = 1) -> str:
        """Reserve (free) a table or slot at a shop that supports reservations."""
        self._check_user(user_id)
        shop = self._shop(shop_id)
        if not shop.get("enable_reservation", False):
            raise ToolError(f"Shop {shop_id} does not support reservations")
        rid = self._new_id("R")
        self.state["reservations"][rid] = {
            "reservation_id": rid,
            "shop_id": shop_id,
            "reservation_time": self._slot(time),
            "customer_id": str(user_id),
            "customer_count": int(customer_count),
            "status": "reserved",
            "update_time": self.now,
        }
        return f"Reservation created: {_dump(self.state['reservations'][rid])}"

    def instore_modify_reservation(self, reservation_id: str, time: str, customer_count: int | None = None) -> str:
        """Change the time (and optionally the party size) of a reservation."""
        res = self._get("reservations", reservation_id)
        if res["status"] == "cancelled":
            raise ToolError(f"Reservation {reservation_id} is cancelled")
        res["reservation_time"] = self._slot(time)
        if customer_count is not None:
            res["customer_count"] = int(customer_count)
        res["update_time"] = self.now
        return f"Reservation {reservation_id} modified: {_dump(res)}"

    def instore_cancel_reservation(self, reservation_id: str) -> str:
        """Cancel a reservation."""
        res = self._get("reservations", reservation_id)
        res["status"], res["update_time"] = "cancelled", self.now
        return f"Reservation {reservation_id} cancelled."

    def _get(self, key: str, item_id: str) -> dict:
        item = self.state[key].get(item_id)
        if item is None:
            raise ToolError(f"{key[:-1].capitalize()} {item_id!r} not found")
        return item

    def get_instore_orders(self, user_id: str) -> str:
        """All in-store product orders of a user."""
        return _dump(
            [
                _public_order(o)
                for o in self.state["orders"].values()
                if o.get("order_type") == "instore" and o.get("user_id") == str(user_id)
            ]
        )

    def get_instore_reservations(self, user_id: str) -> str:
        """All reservations of a user."""
        return _dump([r for r in self.state["reservations"].values() if r.get("customer_id") == str(user_id)])

    def get_instore_books(self, user_id: str) -> str:
        """All bookings of a user."""
        return _dump([b for b in self.state["books"].values() if b.get("customer_id") == str(user_id)])

    def search_instore_book(self, user_id: str, book_id: str | None = None) -> str:
        """Bookings of a user, optionally one booking id."""
        return _dump(
            [
                b
                for b in self.state["books"].values()
                if b.get("customer_id") == str(user_id) and book_id in (None, b["book_id"])
            ]
        )

    def search_instore_reservation(self, user_id: str, reservation_id: str | None = None) -> str:
        """Reservations of a user, optionally one reservation id."""
        res = self.state["reservations"].values()
        return _dump(
            [r for r in res if r.get("customer_id") == str(user_id) and reservation_id in (None, r["reservation_id"])]
        )

    # ------------------------------------------------------------------ OTA
    def _ota(self, kind: str, entity_id: str) -> dict:
        key = OTA_KINDS[kind][0]
        entity = self._entities(key).get(str(entity_id).strip())
        if entity is None:
            raise ToolError(f"{kind.capitalize()} {entity_id!r} not found")
        return entity

    def _ota_order(
        self, kind: str, entity_id: str, product_id: str, user_id: str, quantity: int, date: str | None
    ) -> str:
        self._check_user(user_id)
        entity = self._ota(kind, entity_id)
        product = next((p for p in entity.get("products", []) if p.get("product_id") == product_id), None)
        if product is None:
            raise ToolError(f"{product_id!r} is not a product of {kind} {entity_id}")
        if date is not None and product.get("date") and product["date"] != date:
            raise ToolError(f"Product {product_id} is for {product['date']}, not {date}")
        quantity = int(quantity)
        if quantity <= 0:
            raise ToolError("quantity must be positive")
        if isinstance(product.get("quantity"), int):
            if product["quantity"] < quantity:
                raise ToolError(f"Product {product_id} has only {product['quantity']} left")
            product["quantity"] -= quantity
        order_id = self._new_id(kind[0].upper() + "O")
        self.state["orders"][order_id] = {
            "order_id": order_id,
            "order_type": kind,
            "user_id": str(user_id),
            "store_id": entity_id,
            "date": date or product.get("date", ""),
            "total_price": round(float(product.get("price", 0)) * quantity, 2),
            "create_time": self.now,
            "update_time": self.now,
            "status": "unpaid",
            "products": [
                {**{k: v for k, v in product.items() if k != "quantity"}, "quantity": quantity, "_ref": product}
            ],
        }
        return f"Order created: {_public_order(self.state['orders'][order_id])}"

    def _ota_search_orders(self, kind: str, user_id: str, date: str | None, status: str | None) -> str:
        out = [
            _public_order(o)
            for o in self.state["orders"].values()
            if o.get("order_type") == kind
            and o.get("user_id") == str(user_id)
            and (date is None or o.get("date") == date)
            and (status is None or o.get("status") == status)
        ]
        return _dump(out)

    def _ota_modify(self, kind: str, order_id: str, user_id: str, new_date: str) -> str:
        order = self._order(order_id, kind)
        if order.get("user_id") != str(user_id):
            raise ToolError(f"Order {order_id} does not belong to user {user_id}")
        if order["status"] == "cancelled":
            raise ToolError(f"Order {order_id} is cancelled")
        item = order["products"][0]
        entity = self._ota(kind, order["store_id"])
        new = next(
            (
                p
                for p in entity.get("products", [])
                if p.get("date") == new_date and p.get("seat_type") == item.get("seat_type")
            ),
            None,
        )
        if new is None:
            raise ToolError(f"No {item.get('seat_type')} seat on {new_date} for {kind} {order['store_id']}")
        if isinstance(new.get("quantity"), int):
            if new["quantity"] < item["quantity"]:
                raise ToolError(f"Only {new['quantity']} seats left on {new_date}")
            new["quantity"] -= item["quantity"]
            item["_ref"]["quantity"] += item["quantity"]
        order["products"] = [
            {**{k: v for k, v in new.items() if k != "quantity"}, "quantity": item["quantity"], "_ref": new}
        ]
        order["date"], order["update_time"] = new_date, self.now
        order["total_price"] = round(float(new.get("price", 0)) * item["quantity"], 2)
        return f"Order {order_id} moved to {new_date}: {_public_order(order)}"

    def _ota_search(self, kind: str, filters: dict) -> str:
        out = []
        for e in self._entities(OTA_KINDS[kind][0]).values():
            ok = all(
                any(
                    _match(e.get(f, "") if not isinstance(e.get(f), dict) else e[f].get("address", ""), v)
                    for f in fields
                )
                for fields, v in filters.items()
                if v
            )
            if ok:
                out.append(e)
        return _dump(out) if out else f"No {kind}s found."

    def get_ota_hotel_info(self, hotel_id: str) -> str:
        """Details of a hotel, including rooms."""
        return _dump(self._ota("hotel", hotel_id))

    def get_ota_attraction_info(self, attraction_id: str) -> str:
        """Details of an attraction, including tickets."""
        return _dump(self._ota("attraction", attraction_id))

    def get_ota_flight_info(self, flight_id: str) -> str:
        """Details of a flight, including seats."""
        return _dump(self._ota("flight", flight_id))

    def get_ota_train_info(self, train_id: str) -> str:
        """Details of a train, including seats."""
        return _dump(self._ota("train", train_id))

    def get_taxi_info(self, taxi_id: str) -> str:
        """Details of a taxi service."""
        return _dump(self._ota("taxi", taxi_id))

    def hotel_search_recommand(self, city_name: str, key_words: list[str] | None = None) -> str:
        """Hotels in a city, optionally matching any keyword in name or tags."""
        out = []
        for h in self._entities("hotels").values():
            if not _match((h.get("location") or {}).get("address", ""), city_name):
                continue
            texts = [h.get("hotel_name", ""), *h.get("tags", [])]
            if not key_words or any(_match(t, k) for k in key_words for t in texts):
                out.append(h)
        return _dump(out) if out else "No hotels found."

    def attractions_search_recommend(self, city_name: str, key_words: list[str]) -> str:
        """Attractions in a city matching any keyword in name or description."""
        out = []
        for a in self._entities("attractions").values():
            if not _match((a.get("location") or {}).get("address", ""), city_name):
                continue
            texts = [a.get("attraction_name", ""), a.get("description", "")]
            if not key_words or any(_match(t, k) for k in key_words for t in texts):
                out.append(a)
        return _dump(out) if out else "No attractions found."

    def flight_search_recommend(self, departure: str, destination: str) -> str:
        """Flights between two cities."""
        return self._ota_search("flight", {("departure_city",): departure, ("arrival_city",): destination})

    def train_ticket_search(self, departure: str, destination: str, date: str) -> str:
        """Trains between two cities with seats on a date."""
        found = (
            json.loads(s)
            if (
                s := self._ota_search("train", {("departure_city",): departure, ("arrival_city",): destination})
            ).startswith("[")
            else []
        )
        out = [{**t, "products": [p for p in t.get("products", []) if p.get("date") == date]} for t in found]
        out = [t for t in out if t["products"]]
        return json.dumps(out, ensure_ascii=False) if out else "No trains found."

    def taxi_search(self, departure_location: str, arrival_location: str) -> str:
        """Taxi services between two places."""
        return self._ota_search(
            "taxi", {("departure_location",): departure_location, ("arrival_location",): arrival_location}
        )

    def create_hotel_order(self, hotel_id: str, room_id: str, user_id: str) -> str:
        """Book one hotel room (a room product is one night on one date)."""
        return self._ota_order("hotel", hotel_id, room_id, user_id, 1, None)

    def create_attraction_order(
        self, attraction_id: str, ticket_id: str, user_id: str, date: str, quantity: int
    ) -> str:
        """Buy attraction tickets for a date."""
        return self._ota_order("attraction", attraction_id, ticket_id, user_id, quantity, date)

    def create_flight_order(self, flight_id: str, seat_id: str, user_id: str, date: str, quantity: int) -> str:
        """Buy flight seats for a date."""
        return self._ota_order("flight", flight_id, seat_id, user_id, quantity, date)

    def create_train_order(self, train_id: str, seat_id: str, user_id: str, date: str, quantity: int) -> str:
        """Buy train seats for a date."""
        return self._ota_order("train", train_id, seat_id, user_id, quantity, date)

    def create_taxi_order(self, taxi_id: str, product_id: str, user_id: str, quantity: int = 1) -> str:
        """Order a taxi service."""
        return self._ota_order("taxi", taxi_id, product_id, user_id, quantity, None)

    def pay_hotel_order(self, order_id: str) -> str:
        """Pay a hotel order."""
        return self._pay(self._order(order_id, "hotel"))

    def pay_attraction_order(self, order_id: str) -> str:
        """Pay an attraction order."""
        return self._pay(self._order(order_id, "attraction"))

    def pay_flight_order(self, order_id: str) -> str:
        """Pay a flight order."""
        return self._pay(self._order(order_id, "flight"))

    def pay_train_order(self, order_id: str) -> str:
        """Pay a train order."""
        return self._pay(self._order(order_id, "train"))

    def pay_taxi_order(self, order_id: str) -> str:
        """Pay a taxi order."""
        return self._pay(self._order(order_id, "taxi"))

    def search_hotel_order(self, user_id: str, date: str | None = None, status: str | None = "paid") -> str:
        """Hotel orders of a user, filtered by date and status."""
        return self._ota_search_orders("hotel", user_id, date, status)

    def search_attraction_order(self, user_id: str, date: str | None = None, status: str | None = "paid") -> str:
        """Attraction orders of a user, filtered by date and status."""
        return self._ota_search_orders("attraction", user_id, date, status)

    def search_flight_order(self, user_id: str, date: str | None = None, status: str | None = "paid") -> str:
        """Flight orders of a user, filtered by date and status."""
        return self._ota_search_orders("flight", user_id, date, status)

    def search_train_order(self, user_id: str, date: str | None = None, status: str | None = "paid") -> str:
        """Train orders of a user, filtered by date and status."""
        return self._ota_search_orders("train", user_id, date, status)

    def search_taxi_order(self, user_id: str, status: str | None = "paid") -> str:
        """Taxi orders of a user, filtered by status."""
        return self._ota_search_orders("taxi", user_id, None, status)

    def get_hotel_order_detail(self, order_id: str) -> str:
        """Details of a hotel order."""
        return _dump(_public_order(self._order(order_id, "hotel")))

    def get_attraction_order_detail(self, order_id: str) -> str:
        """Details of an attraction order."""
        return _dump(_public_order(self._order(order_id, "attraction")))

    def get_flight_order_detail(self, order_id: str) -> str:
        """Details of a flight order."""
        return _dump(_public_order(self._order(order_id, "flight")))

    def get_train_order_detail(self, order_id: str) -> str:
        """Details of a train order."""
        return _dump(_public_order(self._order(order_id, "train")))

    def get_taxi_order_detail(self, order_id: str) -> str:
        """Details of a taxi order."""
        return _dump(_public_order(self._order(order_id, "taxi")))

    def modify_train_order(self, order_id: str, user_id: str, new_date: str) -> str:
        """Move a train order to the same seat type on another date."""
        return self._ota_modify("train", order_id, user_id, new_date)

    def modify_flight_order(self, order_id: str, user_id: str, new_date: str) -> str:
        """Move a flight order to the same seat type on another date."""
        return self._ota_modify("flight", order_id, user_id, new_date)

    def cancel_hotel_order(self, order_id: str, user_id: str) -> str:
        """Cancel a hotel order."""
        return self._cancel(self._order(order_id, "hotel"), user_id)

    def cancel_attraction_order(self, order_id: str, user_id: str) -> str:
        """Cancel an attraction order."""
        return self._cancel(self._order(order_id, "attraction"), user_id)

    def cancel_flight_order(self, order_id: str, user_id: str) -> str:
        """Cancel a flight order."""
        return self._cancel(self._order(order_id, "flight"), user_id)

    def cancel_train_order(self, order_id: str, user_id: str) -> str:
        """Cancel a train order."""
        return self._cancel(self._order(order_id, "train"), user_id)

    def cancel_taxi_order(self, order_id: str, user_id: str) -> str:
        """Cancel a taxi order."""
        return self._cancel(self._order(order_id, "taxi"), user_id)

    # ------------------------------------------------------------------ state for the judge and tests
    def public_state(self) -> dict:
        """Orders, reservations and books without internal references (what the outcome check and tests read)."""
        return {
            "orders": {k: _public_order(v) for k, v in self.state["orders"].items()},
            "reservations": copy.deepcopy(self.state["reservations"]),
            "books": copy.deepcopy(self.state["books"]),
        }

    def find_entity(self, entity_id: str) -> dict | None:
        """The raw entity (with hidden labels) of any domain by id, for the outcome check."""
        for key in ("stores", "shops", *(v[0] for v in OTA_KINDS.values())):
            entity = self._entities(key).get(entity_id)
            if entity is not None:
                return entity
        return None


def _public_order(order: dict) -> dict:
    out = {k: v for k, v in order.items() if k != "products"}
    out["products"] = [{k: v for k, v in p.items() if k != "_ref"} for p in order.get("products", [])]
    return out


E = Environment
GENERAL_TOOLS = [
    E.longitude_latitude_to_distance,
    E.weather,
    E.address_to_longitude_latitude,
    E.get_date_holiday_info,
    E.get_holiday_date,
    E.get_user_all_orders,
    E.get_nearby,
]
DOMAIN_TOOLS = {
    "delivery": [
        E.delivery_distance_to_time,
        E.get_delivery_store_info,
        E.get_delivery_product_info,
        E.delivery_store_search_recommand,
        E.delivery_product_search_recommand,
        E.create_delivery_order,
        E.pay_delivery_order,
        E.get_delivery_order_status,
        E.cancel_delivery_order,
        E.modify_delivery_order,
        E.search_delivery_orders,
        E.get_delivery_order_detail,
    ],
    "instore": [
        E.instore_shop_search_recommend,
        E.instore_product_search_recommend,
        E.create_instore_product_order,
        E.pay_instore_order,
        E.instore_cancel_order,
        E.instore_book,
        E.pay_instore_book,
        E.instore_cancel_book,
        E.instore_reservation,
        E.instore_modify_reservation,
        E.instore_cancel_reservation,
        E.get_instore_orders,
        E.get_instore_reservations,
        E.get_instore_books,
        E.search_instore_book,
        E.search_instore_reservation,
    ],
    "ota": [
        E.get_ota_hotel_info,
        E.get_ota_attraction_info,
        E.get_ota_flight_info,
        E.get_ota_train_info,
        E.hotel_search_recommand,
        E.attractions_search_recommend,
        E.flight_search_recommend,
        E.train_ticket_search,
        E.create_hotel_order,
        E.create_attraction_order,
        E.create_flight_order,
        E.create_train_order,
        E.pay_hotel_order,
        E.pay_attraction_order,
        E.pay_flight_order,
        E.pay_train_order,
        E.search_hotel_order,
        E.search_attraction_order,
        E.search_flight_order,
        E.search_train_order,
        E.get_hotel_order_detail,
        E.get_attraction_order_detail,
        E.get_flight_order_detail,
        E.get_train_order_detail,
        E.modify_train_order,
        E.modify_flight_order,
        E.cancel_hotel_order,
        E.cancel_attraction_order,
        E.cancel_flight_order,
        E.cancel_train_order,
        E.get_taxi_info,
        E.taxi_search,
        E.create_taxi_order,
        E.pay_taxi_order,
        E.cancel_taxi_order,
        E.search_taxi_order,
        E.get_taxi_order_detail,
    ],
}
# Tools whose successful call the optional outcome check inspects (paper spec sec. 2.5).
OUTCOME_WRITE_TOOLS = (
    "create_delivery_order",
    "create_instore_product_order",
    "instore_reservation",
    "instore_book",
    "create_hotel_order",
    "create_flight_order",
    "create_train_order",
    "create_attraction_order",
)
WRITE_TOOLS = frozenset(
    f.__name__
    for fs in DOMAIN_TOOLS.values()
    for f in fs
    if f.__name__.split("_")[0] in ("create", "pay", "cancel", "modify")
    or f.__name__.startswith(("instore_book", "instore_reservation", "instore_cancel", "instore_modify"))
)

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_type(annotation) -> dict:
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    text = str(annotation)
    for py, js in (("str", "string"), ("int", "integer"), ("float", "number")):
        if text.startswith(f"list[{py}]"):
            return {"type": "array", "items": {"type": js}}
    for py, js in (("str", "string"), ("int", "integer"), ("float", "number")):
        if text.startswith(py):
            return {"type": js}
    raise ValueError(f"Unsupported tool parameter annotation {annotation!r}")


def tool_schema(func) -> dict:
    """OpenAI function schema from a tool's signature and the first line of its docstring."""
    params, required = {}, []
    for name, p in inspect.signature(func).parameters.items():
        if name == "self":
            continue
        params[name] = _json_type(p.annotation)
        if p.default is inspect.Parameter.empty:
            required.append(name)
    doc = (func.__doc__ or "").strip().splitlines()[0]
    return {
        "type": "function",
        "function": {
            "name": func.__name__,
            "description": doc,
            "parameters": {"type": "object", "properties": params, "required": required},
        },
    }
