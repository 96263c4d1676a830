"""The official data models: which fields an entity declares, and how the official tools print it.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/data_model/tasks.py` (`Location`, `StoreBaseModel`, `ProductBaseModel`, `Order`, `Weather`),
`src/vita/domains/delivery/data_model.py` (`Store`, `StoreProduct`), `src/vita/domains/instore/data_model.py`
(`Shop`, `ShopProduct`, `BookInfo`, `ReservationInfo`) and `src/vita/domains/ota/data_model.py` (`Hotel`,
`Attraction`, `Flight`, `Train`, `Taxi` and their products). The official environment loads the task's database
through these pydantic models, so every field they do not declare (`shop_type`, `product_type`, `target_reason`,
`category`, `business_hours`, ...) is dropped before any tool sees it; `declared_state` does the same. Searches,
`get_nearby` and order lists print each entity's `__str__` (a one-line header: no products), info tools its
`__repr__` (header and products); `render` writes both forms in the official field order.
"""

# Model -> its declared fields in the official print order: (field, printed label, kind). Kinds: "str", "float" and
# "int" (pydantic coerces the value), "list" (printed as a Python list), "any" (kept as is), a model name (nested),
# "[Model]" (a list of that model), "LocationStr" (a `Location` the OTA models print with pydantic's default `str`,
# `address='...' longitude=... latitude=...`, where the others print its `__repr__`). Fields with label None are
# declared but not printed.
_S, _F, _I, _L = "str", "float", "int", "list"
_SEAT_PRODUCT = (
    ("seat_type", "seat_type", _S),
    ("date", "date", _S),
    ("price", "price", _F),
    ("quantity", "quantity", _I),
    ("product_id", "seat_id", _S),
)
MODELS: dict[str, tuple] = {
    "Location": (("address", "address", _S), ("longitude", "longitude", _F), ("latitude", "latitude", _F)),
    "StoreProduct": (
        ("store_name", "store_name", _S),
        ("store_id", "store_id", _S),
        ("name", "product_name", _S),
        ("product_id", "product_id", _S),
        ("attributes", "attributes", "attributes"),
        ("quantity", "quantity", _I),
        ("price", "price", _F),
        ("tags", "tags", _L),
    ),
    "Store": (
        ("name", "name", _S),
        ("store_id", "store_id", _S),
        ("score", "score", _F),
        ("location", "location", "Location"),
        ("tags", "tags", _L),
        ("products", "products", "[StoreProduct]"),
    ),
    "ShopProduct": (
        ("shop_id", "shop_id", _S),
        ("product_id", "product_id", _S),
        ("name", "name", _S),
        ("price", "price", _F),
        ("quantity", "quantity", _I),
        ("tags", "tags", _L),
    ),
    "Shop": (
        ("shop_name", "shop_name", _S),
        ("shop_id", "shop_id", _S),
        ("score", "score", _F),
        ("location", "location", "Location"),
        ("tags", "tags", _L),
        ("enable_book", "enable_book", "any"),
        ("book_price", "book_price", _F),
        ("enable_reservation", "enable_reservation", "any"),
        ("products", "products", "[ShopProduct]"),
        ("store_id", None, _S),
    ),
    "HotelProduct": (
        ("room_type", "room_type", _S),
        ("date", "date", _S),
        ("price", "price", _F),
        ("quantity", "quantity", _I),
        ("product_id", "room_id", _S),
    ),
    "AttractionProduct": (
        ("ticket_type", "ticket_type", _S),
        ("date", "date", _S),
        ("price", "price", _F),
        ("quantity", "quantity", _I),
        ("product_id", "attraction_id", _S),
    ),
    "FlightProduct": _SEAT_PRODUCT,
    "TrainProduct": _SEAT_PRODUCT,
    "TaxiProduct": (
        ("taxi_type", "taxi_type", _S),
        ("platform", "platform", _S),
        ("price", "price", _F),
        ("quantity", "quantity", _I),
        ("product_id", "product_id", _S),
    ),
    "Hotel": (
        ("hotel_id", "hotel_id", _S),
        ("hotel_name", "hotel_name", _S),
        ("score", "score", _F),
        ("star_rating", "star_rating", _I),
        ("location", "location", "LocationStr"),
        ("tags", "tags", _L),
        ("products", "products", "[HotelProduct]"),
        ("store_id", None, _S),
    ),
    "Attraction": (
        ("attraction_id", "attraction_id", _S),
        ("attraction_name", "attraction_name", _S),
        ("location", "location", "LocationStr"),
        ("description", "description", _S),
        ("score", "score", _F),
        ("opening_hours", "opening_hours", _S),
        ("ticket_price", "ticket_price", _F),
        ("products", "products", "[AttractionProduct]"),
        ("store_id", None, _S),
    ),
    "Flight": (
        ("flight_id", "flight_id", _S),
        ("flight_number", "flight_number", _S),
        ("departure_city", "departure_city", _S),
        ("arrival_city", "arrival_city", _S),
        ("departure_airport_location", "departure_airport_location", "LocationStr"),
        ("arrival_airport_location", "arrival_airport_location", "LocationStr"),
        ("departure_time", "departure_time", _S),
        ("arrival_time", "arrival_time", _S),
        ("tags", "tags", _L),
        ("products", "products", "[FlightProduct]"),
        ("store_id", None, _S),
    ),
    "Train": (
        ("train_id", "train_id", _S),
        ("train_number", "train_number", _S),
        ("departure_city", "departure_city", _S),
        ("arrival_city", "arrival_city", _S),
        ("departure_station_location", "departure_station_location", "LocationStr"),
        ("arrival_station_location", "arrival_station_location", "LocationStr"),
        ("departure_time", "departure_time", _S),
        ("arrival_time", "arrival_time", _S),
        ("tags", "tags", _L),
        ("products", "products", "[TrainProduct]"),
        ("store_id", None, _S),
    ),
    "Taxi": (
        ("taxi_id", "taxi_id", _S),
        ("taxi_type", "taxi_type", _S),
        ("platform", "platform", _S),
        ("departure_location", "departure_location", "LocationStr"),
        ("arrival_location", "arrival_location", "LocationStr"),
        ("estimated_duration", "estimated_duration", _S),
        ("estimated_price", "estimated_price", _F),
        ("tags", "tags", _L),
        ("products", "products", "[TaxiProduct]"),
        ("store_id", None, _S),
    ),
    # `Order.products` is `List[Any]` officially: kept as it is.
    "Order": (
        ("order_id", "order_id", _S),
        ("order_type", "order_type", _S),
        ("user_id", "user_id", _S),
        ("store_id", "store_id", _S),
        ("dispatch_time", "dispatch_time", _S),
        ("shipping_time", "shipping_time", _F),
        ("delivery_time", "delivery_time", _S),
        ("total_price", "total_price", _F),
        ("create_time", "create_time", _S),
        ("update_time", "update_time", _S),
        ("note", "note", _S),
        ("status", "status", _S),
        ("location", "location", "Location"),
        ("products", "products", "any"),
    ),
    "BookInfo": (
        ("book_id", "book_id", _S),
        ("shop_id", "shop_id", _S),
        ("book_time", "book_time", _S),
        ("customer_id", "customer_id", _S),
        ("customer_count", "customer_count", _I),
        ("book_price", "book_price", _F),
        ("status", "status", _S),
        ("update_time", None, _S),
    ),
    "ReservationInfo": (
        ("reservation_id", "reservation_id", _S),
        ("shop_id", "shop_id", _S),
        ("reservation_time", "reservation_time", _S),
        ("customer_id", "customer_id", _S),
        ("customer_count", "customer_count", _I),
        ("status", "status", _S),
        ("update_time", None, _S),
    ),
    "Weather": (
        ("city", "city", _S),
        ("category", "weather", _S),
        ("datetime", "datetime", _S),
        ("temperature", "temperature", "any"),
        ("humidity", "humidity", _F),
    ),
}
# Environment container -> the model of its entities (official `DeliveryDB`, `InStoreDB`, `OTADB`, `DB`).
CONTAINER_MODELS = {
    "stores": "Store",
    "shops": "Shop",
    "hotels": "Hotel",
    "attractions": "Attraction",
    "flights": "Flight",
    "trains": "Train",
    "taxis": "Taxi",
    "orders": "Order",
    "books": "BookInfo",
    "reservations": "ReservationInfo",
    "weather": "Weather",
}
# Order type -> the label of its entity id (official `Order.id_str`).
ORDER_ID_LABEL = {
    "delivery": "store_id",
    "instore": "shop_id",
    "hotel": "hotel_id",
    "attraction": "attraction_id",
    "flight": "flight_id",
    "train": "train_id",
    "taxi": "store_id",
}
# Order type -> the model of the products an order holds (the official tools put product objects in orders).
ORDER_PRODUCT_MODELS = {
    "delivery": "StoreProduct",
    "instore": "ShopProduct",
    "hotel": "HotelProduct",
    "attraction": "AttractionProduct",
    "flight": "FlightProduct",
    "train": "TrainProduct",
    "taxi": "TaxiProduct",
}
_COERCE = {_F: float, _I: int}
# Official `ProductBaseModel` defaults (every `*Product` model).
_PRODUCT_DEFAULTS = {"product_id": "", "price": 0.0, "quantity": 0}


def declared(model: str, obj):
    """`obj` with only the fields `model` declares, numbers coerced and product defaults filled as pydantic does (a
    value that cannot be coerced is kept: the official loader would refuse the task instead)."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for field, _, kind in MODELS[model]:
        if field not in obj:
            if model.endswith("Product") and field in _PRODUCT_DEFAULTS:
                out[field] = _PRODUCT_DEFAULTS[field]
            continue
        value = obj[field]
        if kind in _COERCE and value is not None:
            try:
                value = _COERCE[kind](value)
            except (TypeError, ValueError):
                pass
        elif kind == "attributes" and isinstance(value, list):  # official validator joins a list
            value = ", ".join(map(str, value))
        elif kind.startswith("[") and isinstance(value, list):
            value = [declared(kind[1:-1], v) for v in value]
        elif kind in MODELS or kind == "LocationStr":
            value = declared("Location", value) if kind == "LocationStr" else declared(kind, value)
        out[field] = value
    return out


def product_model(model: str) -> str:
    """The model of `model`'s products (`Store` -> `StoreProduct`, ...)."""
    return next(kind[1:-1] for field, _, kind in MODELS[model] if field == "products")


def declared_state(environment: dict) -> dict:
    """The environment as the official database holds it: every entity reduced to its declared fields."""
    out = dict(environment)
    for key, model in CONTAINER_MODELS.items():
        value = out.get(key)
        if isinstance(value, dict):
            out[key] = {k: declared(model, v) for k, v in value.items()}
        elif isinstance(value, list):
            out[key] = [declared(model, v) for v in value]
    return out


# Declared fields the header (`__str__`) leaves out although the full form prints them (official
# `Attraction.__str__` stops at `opening_hours`).
HEADER_OMITS = {("Attraction", "ticket_price")}


def _value(kind: str, value) -> str:
    if kind == "Location" and isinstance(value, dict):
        return f"{value.get('address', '')} longitude:{value.get('longitude')},latitude:{value.get('latitude')}"
    if kind == "LocationStr" and isinstance(value, dict):
        return (
            f"address={value.get('address', '')!r} longitude={value.get('longitude')} latitude={value.get('latitude')}"
        )
    return str(value)


def render(model: str, obj: dict, products: bool = False) -> str:
    """The official print form: `Model(label=value, ...)`, the header (`__str__`) or, with `products`, the
    `__repr__` that appends each product's repr on its own line."""
    parts, items = [], ""
    for field, label, kind in MODELS[model]:
        if label is None or (not products and (model, field) in HEADER_OMITS):
            continue
        if kind.startswith("["):
            if products:
                items = "\n".join(render(kind[1:-1], p) for p in obj.get(field) or [])
            continue
        parts.append(f"{label}={_value(kind, obj.get(field, ''))}")
    head = f"{model}({', '.join(parts)}"
    return f"{head}, products={items})" if products else f"{head})"


def render_order(order: dict, products: bool = True) -> str:
    """Official `Order.__repr__`: delivery orders print dispatch, shipping and delivery times and the note; without
    `products`, `Order.__str__` (the header the OTA order searches print)."""
    kind = order.get("order_type", "")
    fields = ["order_id", "order_type", "user_id", "store_id"]
    if kind == "delivery" and products:
        fields += ["dispatch_time", "shipping_time", "delivery_time"]
    fields += ["total_price", "create_time", "update_time"]
    fields += ["note", "status"] if kind == "delivery" and products else ["status"]
    label = {"store_id": ORDER_ID_LABEL.get(kind, "store_id")}
    parts = [f"{label.get(f, f)}:{order.get(f, '')}" for f in fields]
    if not products:
        return f"Order({', '.join(parts)})"
    product_model = ORDER_PRODUCT_MODELS.get(kind)
    items = [render(product_model, p) if product_model else str(p) for p in order.get("products") or []]
    return f"Order({', '.join(parts)}, products:[{', '.join(items)}])"


def render_weather(w: dict) -> str:
    """Official `Weather.__repr__`."""
    low, high = (list(w.get("temperature") or []) + ["", ""])[:2]
    return (
        f"city: {w.get('city', '')}, weather: {w.get('category', '')}, datetime: {w.get('datetime', '')}, "
        f"temperature: {low}~{high}, humidity: {w.get('humidity', '')}"
    )
