"""Plumbing shared by the domain toolkits (state, tool dispatch, schemas, fuzzy search) and the general tools.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/environment/
toolkit.py` (general tools: distance, weather, address lookup, holidays, all orders, nearby) and
`src/vita/utils/utils.py` (`rerank`: fuzzy partial-ratio ranking of every candidate; `fuzzy_match`: partial ratio
>= 40; `fuzzy_ratio_match`: ratio >= 20). The state holds only the fields the official data models declare
(`models.declared_state`), and tools print entities as the official models do (`models.render`).
"""

import copy
import inspect
import json
import math
import random
from datetime import datetime

from rapidfuzz import fuzz, process
from rapidfuzz.utils import default_process

from .calendar import HOLIDAY_MODES, OFFICIAL_HOLIDAYS, holiday_date, statutory_holiday
from .docs import argument_doc, tool_description
from .models import CONTAINER_MODELS, declared_state, render, render_order, render_weather


TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# Search tools return the 100 best-ranked candidates (official `top_k = 100` in every *_search_recommand tool).
SEARCH_TOP_K = 100
# What the outcome judge, which reads the raw task environment, never sees (official
# `src/vita/evaluator/outcome_evaluator.py`, `LEAKY_TYPE_FIELDS` / `LEAKY_META_FIELDS`). The tools need no such list:
# their environment holds only declared fields (`models.declared_state`).
HIDDEN_KEYS = ("distraction_reason",)
HIDDEN_LABELS = ("target", "distraction")


class ToolError(ValueError):
    """A tool call failed (bad id, bad argument, wrong state); returned to the agent as an error message."""


def sanitize(obj):
    """Deep copy of a raw task entity without the hidden labels (`*_type` = target/distraction,
    `distraction_reason`), for the outcome judge."""
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
    """Great-circle distance in metres (official: R = 6371000 m, rounded to the metre)."""
    if lon1 == lon2 and lat1 == lat2:
        return 0.0
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return round(2 * 6371000 * math.asin(math.sqrt(a)), 0)


def rerank(query: str, docs: dict[str, str]) -> list[tuple[str, float]]:
    """Every doc id ranked by fuzzy partial ratio to `query`, best first (official `rerank`, which calls thefuzz's
    `process.extract(..., scorer=fuzz.partial_ratio)`: lower-cased, punctuation-stripped strings, ordered by the exact
    score, reported rounded to an integer as thefuzz does, so thresholds compare integers). Never filters."""
    ids = list(docs)
    ranked = process.extract(
        query, [docs[i] for i in ids], scorer=fuzz.partial_ratio, processor=default_process, limit=None
    )
    return [(ids[index], round(score)) for _, score, index in ranked]


def fuzzy_match(x: str, y: str) -> bool:
    """Official `fuzzy_match`: partial ratio >= 40 (city and route filters of the OTA searches)."""
    return round(fuzz.partial_ratio(str(x), str(y))) >= 40  # thefuzz scores are rounded integers


def check_time(value: str, fmt: str = TIME_FORMAT) -> datetime:
    try:
        return datetime.strptime(str(value), fmt)
    except ValueError:
        raise ToolError(f"{value!r} must be formatted {fmt}") from None


def _locations(obj, out: list) -> list:
    """Every `{address, longitude, latitude}` dict anywhere in the environment (the official `Location` registry)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("address"), str) and "longitude" in obj and "latitude" in obj:
            out.append(obj)
        for v in obj.values():
            _locations(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _locations(v, out)
    return out


class BaseTools:
    """State and dispatch of one subtask's environment, plus the general tools every domain exposes.

    Args:
        environment (`dict`): the subtask's `environment` (deep-copied; the task is never mutated).
        holidays (`str`, *optional*, defaults to `"official"`): `get_holiday_date`'s table: the official one
            (2023-2025) or `"computed"` (any year, see `calendar.py`).
        shuffle_search (`random.Random`, *optional*): the search-shuffle ablation (official `VITA_SHUFFLE_SEARCH`):
            the ranked candidates of every search are shuffled before the best 100 are cut.
    """

    GENERAL_TOOLS = (
        "longitude_latitude_to_distance",
        "weather",
        "address_to_longitude_latitude",
        "get_date_holiday_info",
        "get_holiday_date",
        "get_user_all_orders",
        "get_nearby",
    )

    def __init__(self, environment: dict, holidays: str = "official", shuffle_search: random.Random | None = None):
        if holidays not in HOLIDAY_MODES:
            raise ValueError(f"Unknown holidays mode {holidays!r}; valid: {list(HOLIDAY_MODES)}")
        self.holidays, self.shuffle_search = holidays, shuffle_search
        self.state = copy.deepcopy(declared_state(environment))
        for key in ("orders", "reservations", "books"):
            if not isinstance(self.state.get(key), dict):
                self.state[key] = {}
        self.user_id = str(self.state.get("user_id", ""))
        self._counter = 0
        self.tools: dict = {}

    # ------------------------------------------------------------------ plumbing
    def call(self, name: str, arguments: dict) -> str:
        """Run tool `name`; unknown names and bad arguments raise `ToolError` listing what is valid."""
        if name not in self.tools:
            raise ToolError(f"Unknown tool {name!r}; valid tools: {sorted(self.tools)}")
        if isinstance(arguments, str):  # the model's arguments did not decode (backends keep the text)
            raise ToolError(f"Tool {name}: the arguments are not valid JSON: {arguments[:300]!r}")
        if not isinstance(arguments, dict):
            raise ToolError(f"Tool {name} takes its arguments as a JSON object, got {json.dumps(arguments)}")
        method = self.tools[name]
        params = inspect.signature(method).parameters
        unknown = [k for k in arguments if k not in params]
        if unknown:
            raise ToolError(f"Tool {name} got unknown arguments {unknown}; valid: {list(params)}")
        try:
            result = method(**arguments)
        except TypeError as err:
            raise ToolError(f"Bad arguments for {name}: {err}") from None
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def _rank(self, query: str, docs: dict[str, str]) -> list[tuple[str, float]]:
        """The search tools' ranking: `rerank`, shuffled under the search-shuffle ablation (official `rerank` with
        `VITA_SHUFFLE_SEARCH`; the official also shuffles the weather and address lookups, which breaks them: ours
        leaves those ranked)."""
        ranked = rerank(query, docs)
        if self.shuffle_search is not None:
            self.shuffle_search.shuffle(ranked)
        return ranked

    def tool_schemas(self) -> list[dict]:
        """OpenAI function-calling schemas of the exposed tools."""
        return [tool_schema(m) for m in self.tools.values()]

    @property
    def now(self) -> str:
        return str(self.state.get("time", "2025-01-01 12:00:00"))

    def _new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter:04d}"

    def _entities(self, key: str) -> dict:
        value = self.state.get(key) or {}
        if isinstance(value, dict):
            return value
        id_field = {"stores": "store_id", "shops": "shop_id"}.get(key, f"{key[:-1]}_id")
        return {str(v.get(id_field, i)).strip(): v for i, v in enumerate(value)}

    def _entity(self, key: str, entity_id: str, label: str) -> dict:
        entity = self._entities(key).get(str(entity_id).strip())
        if entity is None:
            raise ToolError(f"{label} {entity_id!r} not found")
        return entity

    def _check_user(self, user_id: str) -> None:
        if not user_id:
            raise ToolError("User ID cannot be empty")
        if self.user_id and str(user_id) != self.user_id:
            raise ToolError(f"User ID {user_id!r} does not match the current user; check the user id with the user")

    def _order(self, order_id: str, order_type: str) -> dict:
        order = self.state["orders"].get(order_id)
        if order is None:
            raise ToolError(f"Order {order_id!r} not found")
        if order.get("order_type") != order_type:
            raise ToolError(f"Order {order_id} is not a {order_type} order")
        return order

    def _pay(self, order: dict, not_unpaid: str) -> str:
        """Pay an unpaid order; any other status answers `not_unpaid` (official: an answer, not an error)."""
        if order["status"] != "unpaid":
            return not_unpaid
        order["status"], order["update_time"] = "paid", self.now
        return "Payment successful"

    # ------------------------------------------------------------------ general tools
    def longitude_latitude_to_distance(
        self, longitude1: float, latitude1: float, longitude2: float, latitude2: float
    ) -> str:
        """Distance in metres between two (longitude, latitude) points."""
        return str(haversine_m(float(longitude1), float(latitude1), float(longitude2), float(latitude2)))

    def weather(self, address: str, date_start: str, date_end: str) -> str:
        """Weather forecast for a city/address between two dates (YYYY-MM-DD)."""
        start = check_time(date_start, "%Y-%m-%d").date()
        end = check_time(date_end, "%Y-%m-%d").date()
        rows = [w for w in self.state.get("weather") or [] if isinstance(w, dict)]
        cities = {str(w.get("city", "")): str(w.get("city", "")) for w in rows}
        ranked = rerank(address, cities) if cities else []
        # Official: the best-matching city must score at least 50.
        if not ranked or ranked[0][1] < 50:
            raise ToolError(f"Weather information not found for {address}")
        city = ranked[0][0]
        out = sorted(
            (
                w
                for w in rows
                if w.get("city") == city and start <= check_time(w["datetime"], "%Y-%m-%d").date() <= end
            ),
            key=lambda w: w["datetime"],
        )
        return (
            "\n".join(map(render_weather, out))
            if out
            else f"No weather information found for {city} between {date_start} and {date_end}"
        )

    def address_to_longitude_latitude(self, address: str) -> str:
        """Longitude and latitude of a known address."""
        loc = self._locate(address)
        if loc is None:
            raise ToolError(f"Longitude and latitude not found for address {address}")
        return json.dumps([loc["longitude"], loc["latitude"]])

    def _locate(self, address: str) -> dict | None:
        """Official rule: best partial-ratio match over every known address, kept if its score is >= 30 and the plain
        ratio is >= 20."""
        known = {loc["address"]: loc for loc in _locations(self.state, [])}
        if not known or not str(address).strip():
            return None
        best, score = rerank(str(address), {a: a for a in known})[0]
        if score < 30 or round(fuzz.ratio(str(address), best)) < 20:
            return None
        return known[best]

    def get_date_holiday_info(self, date: str) -> str:
        """Name of the statutory holiday on a date (YYYY-MM-DD), if any."""
        day = check_time(date, "%Y-%m-%d").date()
        name = statutory_holiday(day)
        return name if name is not None else f"Date {date} is not a holiday"

    def get_holiday_date(self, year: str, holiday_name: str) -> str:
        """Date of a holiday or festival in a year (official answers, not errors, for unknown years and names)."""
        known = str(year).isdigit() and (self.holidays == "computed" or int(year) in OFFICIAL_HOLIDAYS)
        if not known:
            return f"Holiday data for year {year} not found"
        found = holiday_date(int(year), holiday_name, self.holidays)
        return found if found is not None else f"Holiday named '{holiday_name}' not found in year {year}"

    def get_user_all_orders(self) -> str:
        """All orders of the current user."""
        orders = self.state["orders"]
        if not orders:
            return "User currently has no order information"
        return "\n".join(map(render_order, orders.values()))

    def get_nearby(self, longitude: float, latitude: float, range: float) -> str:  # noqa: A002 (official name)
        """Stores, shops, hotels, attractions, and flights/trains with a station or airport within `range` metres, each
        printed as its header (official `get_nearby` prints `str(entity)`)."""
        lon, lat, out = float(longitude), float(latitude), []
        for key in ("stores", "shops", "hotels", "attractions"):
            for e in self._entities(key).values():
                loc = e.get("location") or {}
                if "longitude" in loc and haversine_m(lon, lat, loc["longitude"], loc["latitude"]) <= float(range):
                    out.append(render(CONTAINER_MODELS[key], e))
        for key, ends in (
            ("flights", ("departure_airport_location", "arrival_airport_location")),
            ("trains", ("departure_station_location", "arrival_station_location")),
        ):
            for e in self._entities(key).values():
                for end in ends:
                    loc = e.get(end) or {}
                    if "longitude" in loc and haversine_m(lon, lat, loc["longitude"], loc["latitude"]) <= float(range):
                        out.append(render(CONTAINER_MODELS[key], e))
                        break
        return "\n".join(out) if out else "No search results found"


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


def tool_schema(method) -> dict:
    """OpenAI function schema from a tool's signature and its documentation in `docs.TOOL_DOCS` (description,
    preconditions, postconditions, returns, one line per argument: the official schema's information)."""
    params, required = {}, []
    for name, p in inspect.signature(method).parameters.items():
        if name == "self":
            continue
        params[name] = {**_json_type(p.annotation), "description": argument_doc(method.__name__, name)}
        if p.default is inspect.Parameter.empty:
            required.append(name)
    return {
        "type": "function",
        "function": {
            "name": method.__name__,
            "description": tool_description(method.__name__),
            "parameters": {"type": "object", "properties": params, "required": required},
        },
    }
