"""OTA (travel) toolkit: hotels, attractions, flights, trains and taxis (search, info, order, pay, query, modify,
cancel).

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/domains/ota/tools.py` (`OTATools`). 37 OTA tools. As there: orders take stock from
the booked product and cancelling does not return it; only paid flight/train orders can move to another date, and a
move to a dearer seat sets the order back to unpaid; city and route filters use fuzzy partial ratio >= 40; taxi
search falls back to every taxi when nothing matches.
"""

from .base import SEARCH_TOP_K, BaseTools, ToolError, check_time, fuzzy_match
from .models import CONTAINER_MODELS, render, render_order


# OTA entity kind -> environment key.
OTA_KINDS = {"hotel": "hotels", "attraction": "attractions", "flight": "flights", "train": "trains", "taxi": "taxis"}


class OTATools(BaseTools):
    """The 37 OTA tools."""

    OTA_TOOLS = (
        "get_ota_hotel_info",
        "get_ota_attraction_info",
        "get_ota_flight_info",
        "get_ota_train_info",
        "hotel_search_recommand",
        "attractions_search_recommend",
        "flight_search_recommend",
        "train_ticket_search",
        "create_hotel_order",
        "create_attraction_order",
        "create_flight_order",
        "create_train_order",
        "pay_hotel_order",
        "pay_attraction_order",
        "pay_flight_order",
        "pay_train_order",
        "search_hotel_order",
        "search_attraction_order",
        "search_flight_order",
        "search_train_order",
        "get_hotel_order_detail",
        "get_attraction_order_detail",
        "get_flight_order_detail",
        "get_train_order_detail",
        "modify_train_order",
        "modify_flight_order",
        "cancel_hotel_order",
        "cancel_attraction_order",
        "cancel_flight_order",
        "cancel_train_order",
        "get_taxi_info",
        "taxi_search",
        "create_taxi_order",
        "pay_taxi_order",
        "cancel_taxi_order",
        "search_taxi_order",
        "get_taxi_order_detail",
    )

    def _ota(self, kind: str, entity_id: str) -> dict:
        return self._entity(OTA_KINDS[kind], entity_id, kind)

    def _product(self, entity: dict, product_id: str, date: str | None) -> dict | None:
        return next(
            (
                p
                for p in entity.get("products", [])
                if str(p.get("product_id", "")).strip() == str(product_id).strip()
                and (date is None or p.get("date") == date)
            ),
            None,
        )

    def _ota_order(self, kind: str, entity_id: str, product: dict, user_id: str, quantity: int) -> str:
        if int(product.get("quantity", 0)) < quantity:
            raise ToolError(f"Insufficient {kind} inventory for {product.get('product_id')}")
        product["quantity"] = int(product.get("quantity", 0)) - quantity
        order_id = self._new_id(kind[0].upper() + "O")
        item = {k: v for k, v in product.items() if k not in ("quantity",)}
        self.state["orders"][order_id] = order = {
            "order_id": order_id,
            "order_type": kind,
            "user_id": str(user_id),
            "store_id": entity_id,
            "total_price": float(product.get("price", 0)) * quantity,
            "create_time": self.now,
            "update_time": self.now,
            "status": "unpaid",
            "products": [{**item, "quantity": quantity}],
        }
        return render_order(order)

    def _search(self, kind: str, keep) -> list[dict]:
        return [e for e in self._entities(OTA_KINDS[kind]).values() if keep(e)]

    def _headers(self, key: str, found: list[dict]) -> str:
        return "\n".join(render(CONTAINER_MODELS[key], e) for e in found)

    def _ota_search_orders(self, kind: str, user_id: str, date: str | None, status: str | None) -> str:
        self._check_user(user_id)
        if date:
            check_time(date, "%Y-%m-%d")
        found = [
            o
            for o in self.state["orders"].values()
            if o.get("order_type") == kind
            and o.get("user_id") == str(user_id)
            and (not status or o.get("status") == status)
            and (not date or any(p.get("date") == date for p in o.get("products", [])))
        ]
        return "\n".join(render_order(o, products=False) for o in found)

    def _ota_cancel(self, kind: str, order_id: str, user_id: str) -> str:
        self._check_user(user_id)
        order = self._order(order_id, kind)
        if order["status"] == "cancelled":
            raise ToolError("Order is already in cancelled status")
        refund = order["total_price"] if order["status"] == "paid" else 0
        order["status"], order["update_time"] = "cancelled", self.now
        return f"Cancellation successful, refund amount: {refund}"

    def _ota_modify(self, kind: str, order_id: str, user_id: str, new_date: str) -> str:
        check_time(new_date, "%Y-%m-%d")
        self._check_user(user_id)
        order = self._order(order_id, kind)
        if order.get("user_id") != str(user_id):
            raise ToolError(f"Order {order_id} does not belong to user {user_id}")
        if order["status"] != "paid":
            raise ToolError(f"Only paid orders can be modified, current status: {order['status']}")
        if len(order["products"]) != 1:
            raise ToolError(f"Only single {kind} ticket order modification is supported")
        old = order["products"][0]
        entity = self._ota(kind, order["store_id"])
        seat, quantity = old.get("seat_type"), int(old["quantity"])
        new = next(
            (p for p in entity.get("products", []) if p.get("date") == new_date and p.get("seat_type") == seat), None
        )
        if new is None:
            raise ToolError(f"New date {new_date} does not have {seat} type seats")
        if int(new.get("quantity", 0)) < quantity:
            raise ToolError(f"Insufficient {seat} seat inventory for new date {new_date}")
        for p in entity.get("products", []):  # the old seats go back to stock
            if p.get("date") == old.get("date") and p.get("seat_type") == seat:
                p["quantity"] = int(p.get("quantity", 0)) + quantity
                break
        new["quantity"] = int(new["quantity"]) - quantity
        diff = float(new["price"]) * quantity - float(old["price"]) * quantity
        if diff > 0:
            order["status"] = "unpaid"
        order["products"] = [{**{k: v for k, v in new.items() if k != "quantity"}, "quantity": quantity}]
        order["total_price"], order["update_time"] = float(new["price"]) * quantity, self.now
        if diff > 0:
            return f"Modification successful, need to pay additional amount: {diff}, please pay as soon as possible"
        return f"Modification successful, price difference: {diff}, refunded"

    # ------------------------------------------------------------------ info
    def get_ota_hotel_info(self, hotel_id: str) -> str:
        """Details of a hotel, including rooms."""
        return f"Hotel Info:\n{render('Hotel', self._ota('hotel', hotel_id), products=True)}"

    def get_ota_attraction_info(self, attraction_id: str) -> str:
        """Details of an attraction, including tickets."""
        return f"Attraction Info:\n{render('Attraction', self._ota('attraction', attraction_id), products=True)}"

    def get_ota_flight_info(self, flight_id: str) -> str:
        """Details of a flight, including seats."""
        return f"Flight Info:\n{render('Flight', self._ota('flight', flight_id), products=True)}"

    def get_ota_train_info(self, train_id: str) -> str:
        """Details of a train, including seats."""
        return f"Train Info:\n{render('Train', self._ota('train', train_id), products=True)}"

    def get_taxi_info(self, taxi_id: str) -> str:
        """Details of a taxi service."""
        return f"Taxi Info:\n{render('Taxi', self._ota('taxi', taxi_id), products=True)}"

    # ------------------------------------------------------------------ search
    def hotel_search_recommand(self, city_name: str, key_words: list[str] | None = None) -> str:
        """Hotels in a city ranked by fuzzy match of the keywords to name and tags (best 100)."""
        hotels = self._search("hotel", lambda h: fuzzy_match(city_name, (h.get("location") or {}).get("address", "")))
        if not hotels:
            return "No hotels found matching the criteria. Please check if the city name is correct and try again."
        docs = {str(i): h.get("hotel_name", "") + ",".join(h.get("tags", [])) for i, h in enumerate(hotels)}
        ranked = self._rank("".join(key_words or []), docs)[:SEARCH_TOP_K]
        return "\n".join(render("Hotel", hotels[int(i)]) for i, _ in ranked)

    def attractions_search_recommend(self, city_name: str, key_words: list[str]) -> str:
        """Attractions in a city ranked by fuzzy match of the keywords to name, description and address (best 100)."""
        found = self._search(
            "attraction", lambda a: fuzzy_match(city_name, (a.get("location") or {}).get("address", ""))
        )
        if not found:
            return (
                "No attractions found matching the criteria. Please check if the city name is correct and try again."
            )
        docs = {
            str(
                i
            ): f"{a.get('attraction_name', '')},{a.get('description', '')},{(a.get('location') or {}).get('address', '')}"
            for i, a in enumerate(found)
        }
        ranked = self._rank("".join(key_words), docs)[:SEARCH_TOP_K]
        return "\n".join(render("Attraction", found[int(i)]) for i, _ in ranked)

    def flight_search_recommend(self, departure: str, destination: str) -> str:
        """Flights between two cities."""
        found = self._search(
            "flight",
            lambda f: (
                fuzzy_match(departure, f.get("departure_city", ""))
                and fuzzy_match(destination, f.get("arrival_city", ""))
            ),
        )
        return self._headers("flights", found) if found else "No flights found matching the criteria"

    def train_ticket_search(self, departure: str, destination: str, date: str) -> str:
        """Trains between two cities with seats on a date."""
        check_time(date, "%Y-%m-%d")
        found = self._search(
            "train",
            lambda t: (
                any(p.get("date") == date for p in t.get("products", []))
                and fuzzy_match(departure, t.get("departure_city", ""))
                and fuzzy_match(destination, t.get("arrival_city", ""))
            ),
        )
        return self._headers("trains", found) if found else "No trains found matching the criteria"

    def taxi_search(self, departure_location: str, arrival_location: str) -> str:
        """Taxi services between two places (every taxi when none matches)."""
        found = self._search(
            "taxi",
            lambda t: (
                fuzzy_match(departure_location, (t.get("departure_location") or {}).get("address", ""))
                and fuzzy_match(arrival_location, (t.get("arrival_location") or {}).get("address", ""))
            ),
        ) or list(self._entities("taxis").values())
        return self._headers("taxis", found) if found else "No taxi services found matching the criteria"

    # ------------------------------------------------------------------ orders
    def create_hotel_order(self, hotel_id: str, room_id: str, user_id: str) -> str:
        """Book one hotel room (a room product is one night on one date)."""
        self._check_user(user_id)
        room = self._product(self._ota("hotel", hotel_id), room_id, None)
        if room is None:
            raise ToolError(f"Room {room_id!r} not found in hotel {hotel_id}")
        if int(room.get("quantity", 0)) <= 0:
            raise ToolError("No available rooms at the moment")
        return self._ota_order("hotel", hotel_id, room, user_id, 1)

    def create_attraction_order(
        self, attraction_id: str, ticket_id: str, user_id: str, date: str, quantity: int
    ) -> str:
        """Buy attraction tickets for a date."""
        return self._dated_order("attraction", attraction_id, ticket_id, user_id, date, quantity)

    def create_flight_order(self, flight_id: str, seat_id: str, user_id: str, date: str, quantity: int) -> str:
        """Buy flight seats for a date."""
        return self._dated_order("flight", flight_id, seat_id, user_id, date, quantity)

    def create_train_order(self, train_id: str, seat_id: str, user_id: str, date: str, quantity: int) -> str:
        """Buy train seats for a date."""
        return self._dated_order("train", train_id, seat_id, user_id, date, quantity)

    def _dated_order(self, kind: str, entity_id: str, product_id: str, user_id: str, date: str, quantity: int) -> str:
        if int(quantity) <= 0:
            raise ToolError("Booking quantity must be greater than 0")
        self._check_user(user_id)
        product = self._product(self._ota(kind, entity_id), product_id, date)
        if product is None:
            raise ToolError(f"The {kind} does not have the specified ticket or seat on the specified date")
        return self._ota_order(kind, entity_id, product, user_id, int(quantity))

    def create_taxi_order(self, taxi_id: str, product_id: str, user_id: str, quantity: int = 1) -> str:
        """Order a taxi service."""
        if int(quantity) <= 0:
            raise ToolError("Booking quantity must be greater than 0")
        self._check_user(user_id)
        product = self._product(self._ota("taxi", taxi_id), product_id, None)
        if product is None:
            raise ToolError("The taxi service does not have the specified product")
        return self._ota_order("taxi", taxi_id, product, user_id, int(quantity))

    def pay_hotel_order(self, order_id: str) -> str:
        """Pay a hotel order."""
        return self._pay(self._order(order_id, "hotel"), "Order status must be unpaid")

    def pay_attraction_order(self, order_id: str) -> str:
        """Pay an attraction order."""
        return self._pay(self._order(order_id, "attraction"), "Order status must be unpaid")

    def pay_flight_order(self, order_id: str) -> str:
        """Pay a flight order."""
        return self._pay(self._order(order_id, "flight"), "Order status must be unpaid")

    def pay_train_order(self, order_id: str) -> str:
        """Pay a train order."""
        return self._pay(self._order(order_id, "train"), "Order status must be unpaid")

    def pay_taxi_order(self, order_id: str) -> str:
        """Pay a taxi order."""
        return self._pay(self._order(order_id, "taxi"), "Order status must be unpaid")

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
        return render_order(self._order(order_id, "hotel"))

    def get_attraction_order_detail(self, order_id: str) -> str:
        """Details of an attraction order."""
        return render_order(self._order(order_id, "attraction"))

    def get_flight_order_detail(self, order_id: str) -> str:
        """Details of a flight order."""
        return render_order(self._order(order_id, "flight"))

    def get_train_order_detail(self, order_id: str) -> str:
        """Details of a train order."""
        return render_order(self._order(order_id, "train"))

    def get_taxi_order_detail(self, order_id: str) -> str:
        """Details of a taxi order."""
        return render_order(self._order(order_id, "taxi"))

    def modify_train_order(self, order_id: str, user_id: str, new_date: str) -> str:
        """Move a paid train order to the same seat type on another date."""
        return self._ota_modify("train", order_id, user_id, new_date)

    def modify_flight_order(self, order_id: str, user_id: str, new_date: str) -> str:
        """Move a paid flight order to the same seat type on another date."""
        return self._ota_modify("flight", order_id, user_id, new_date)

    def cancel_hotel_order(self, order_id: str, user_id: str) -> str:
        """Cancel a hotel order."""
        return self._ota_cancel("hotel", order_id, user_id)

    def cancel_attraction_order(self, order_id: str, user_id: str) -> str:
        """Cancel an attraction order."""
        return self._ota_cancel("attraction", order_id, user_id)

    def cancel_flight_order(self, order_id: str, user_id: str) -> str:
        """Cancel a flight order."""
        return self._ota_cancel("flight", order_id, user_id)

    def cancel_train_order(self, order_id: str, user_id: str) -> str:
        """Cancel a train order."""
        return self._ota_cancel("train", order_id, user_id)

    def cancel_taxi_order(self, order_id: str, user_id: str) -> str:
        """Cancel a taxi order."""
        return self._ota_cancel("taxi", order_id, user_id)
