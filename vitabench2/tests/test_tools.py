"""Each tool's effect on the environment state (delivery, in-store, OTA, general), and replaying the expected orders
of real VitaBench tasks through the tools."""

import json

import pytest

from vitabench2.tasks import load_tasks, sample_tasks_path
from vitabench2.tools import DOMAIN_TOOLS, GENERAL_TOOLS, WRITE_TOOLS, Environment, ToolError, sanitize


@pytest.fixture
def sample():
    tasks = load_tasks(sample_tasks_path())
    return {s.subtask_id: s for t in tasks for s in t.subtasks}


def env_for(sample, sid):
    st = sample[sid]
    return Environment(st.environment, st.domains)


def test_tool_inventory_and_schemas():
    names = [f.__name__ for f in GENERAL_TOOLS] + [f.__name__ for fs in DOMAIN_TOOLS.values() for f in fs]
    assert len(names) == len(set(names)) == 7 + 12 + 16 + 37
    assert "get_user_historical_behaviors" not in names  # leaks ground truth (sec. 6.1)
    env = Environment({"user_id": "U"}, ["delivery", "instore", "ota"])
    schemas = {s["function"]["name"]: s["function"] for s in env.tool_schemas()}
    assert schemas["create_delivery_order"]["parameters"]["properties"]["product_ids"] == {
        "type": "array",
        "items": {"type": "string"},
    }
    assert "note" not in schemas["create_delivery_order"]["parameters"]["required"]
    assert {"create_delivery_order", "pay_train_order", "instore_reservation", "cancel_taxi_order"} <= WRITE_TOOLS
    assert "weather" not in WRITE_TOOLS


def test_unknown_tool_and_arguments(sample):
    env = env_for(sample, "U_SAMPLE_01_T1")
    with pytest.raises(ToolError, match="valid tools"):
        env.call("create_hotel_order", {})  # OTA tool not exposed in a delivery subtask
    with pytest.raises(ToolError, match="unknown arguments"):
        env.call("pay_delivery_order", {"order": "x"})


def test_hidden_labels_never_reach_the_agent(sample):
    env = env_for(sample, "U_SAMPLE_01_T1")
    out = env.call("delivery_store_search_recommand", {"keywords": ["Burger"]})
    assert "Golden Burger" in out and "distraction" not in out and "store_type" not in out
    assert sanitize({"room_type": "King", "hotel_type": "target", "distraction_reason": "x"}) == {"room_type": "King"}


def test_delivery_order_lifecycle(sample):
    env = env_for(sample, "U_SAMPLE_01_T1")
    out = env.call(
        "create_delivery_order",
        {
            "user_id": "U_SAMPLE_01",
            "store_id": "S_NOODLE",
            "product_ids": ["P_DANDAN"],
            "product_cnts": [2],
            "address": "Xixi Center",
            "dispatch_time": "2025-06-10 11:35:00",
            "attributes": ["medium spicy"],
        },
    )
    (oid,) = env.state["orders"]
    order = env.state["orders"][oid]
    assert oid in out and order["status"] == "unpaid" and order["total_price"] == 56
    assert order["products"][0]["attributes"] == "medium spicy"
    # delivery time = dispatch + 25 + 0.00651 * distance minutes (official formula)
    assert order["shipping_time"] >= 25 and order["delivery_time"] > order["dispatch_time"]
    env.call("pay_delivery_order", {"order_id": oid})
    assert env.call("get_delivery_order_status", {"order_id": oid}) == "paid"
    env.call("modify_delivery_order", {"order_id": oid, "note": "no coriander"})
    assert env.state["orders"][oid]["note"] == "no coriander"
    assert (
        json.loads(env.call("search_delivery_orders", {"user_id": "U_SAMPLE_01", "status": "paid"}))[0]["order_id"]
        == oid
    )
    env.call("cancel_delivery_order", {"order_id": oid})
    assert env.state["orders"][oid]["status"] == "cancelled"
    with pytest.raises(ToolError, match="cannot be paid"):
        env.call("pay_delivery_order", {"order_id": oid})
    with pytest.raises(ToolError, match="not found"):
        env.call(
            "create_delivery_order",
            {
                "user_id": "U_SAMPLE_01",
                "store_id": "S_NOODLE",
                "product_ids": ["P_PIZZA"],
                "product_cnts": [1],
                "address": "x",
                "dispatch_time": "2025-06-10 11:35:00",
            },
        )
    with pytest.raises(ToolError, match="in the past"):
        env.call(
            "create_delivery_order",
            {
                "user_id": "U_SAMPLE_01",
                "store_id": "S_NOODLE",
                "product_ids": ["P_DANDAN"],
                "product_cnts": [1],
                "address": "x",
                "dispatch_time": "2025-06-10 11:00:00",
            },
        )
    with pytest.raises(ToolError, match="User"):
        env.call(
            "create_delivery_order",
            {
                "user_id": "U_OTHER",
                "store_id": "S_NOODLE",
                "product_ids": ["P_DANDAN"],
                "product_cnts": [1],
                "address": "x",
                "dispatch_time": "2025-06-10 11:35:00",
            },
        )
    assert env.call("delivery_distance_to_time", {"distance": 1000}) == "32.0"


def test_instore_orders_reservations_books(sample):
    env = env_for(sample, "U_SAMPLE_01_T2")
    env.call(
        "create_instore_product_order",
        {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "product_id": "IP_SET2", "quantity": 3},
    )
    (oid,) = env.state["orders"]
    assert env.state["orders"][oid]["total_price"] == 594 and env.state["orders"][oid]["status"] == "unpaid"
    env.call("pay_instore_order", {"order_id": oid})
    env.call("instore_cancel_order", {"order_id": oid})
    assert env.state["orders"][oid]["status"] == "cancelled"
    with pytest.raises(ToolError, match="not sold by shop"):
        env.call(
            "create_instore_product_order", {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "product_id": "IP_HOT"}
        )
    env.call(
        "instore_reservation",
        {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "time": "2025-06-12 19:00:00", "customer_count": 2},
    )
    (rid,) = env.state["reservations"]
    assert env.state["reservations"][rid]["customer_count"] == 2
    env.call("instore_modify_reservation", {"reservation_id": rid, "time": "2025-06-12 19:30:00"})
    assert env.state["reservations"][rid]["reservation_time"] == "2025-06-12 19:30:00"
    assert json.loads(env.call("search_instore_reservation", {"user_id": "U_SAMPLE_01"}))[0]["reservation_id"] == rid
    env.call("instore_cancel_reservation", {"reservation_id": rid})
    assert env.state["reservations"][rid]["status"] == "cancelled"
    with pytest.raises(ToolError, match="in the past"):
        env.call(
            "instore_reservation", {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "time": "2025-06-11 19:00:00"}
        )
    with pytest.raises(ToolError, match="does not support booking"):
        env.call("instore_book", {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "time": "2025-06-12 19:00:00"})
    env.call(
        "instore_book",
        {"user_id": "U_SAMPLE_01", "shop_id": "I_LOUD", "time": "2025-06-12 19:00:00", "customer_count": 2},
    )
    (bid,) = env.state["books"]
    env.call("pay_instore_book", {"book_id": bid})
    assert env.state["books"][bid]["status"] == "paid" and env.state["books"][bid]["book_price"] == 50
    env.call("instore_cancel_book", {"book_id": bid})
    assert env.state["books"][bid]["status"] == "cancelled"


def test_ota_hotel_and_train(sample):
    env = env_for(sample, "U_SAMPLE_01_T3")
    found = env.call("hotel_search_recommand", {"city_name": "Shanghai", "key_words": ["Gym"]})
    assert "H_GYM" in found and "H_SPA" not in found
    env.call("create_hotel_order", {"hotel_id": "H_GYM", "room_id": "R_GYM_K", "user_id": "U_SAMPLE_01"})
    (oid,) = env.state["orders"]
    assert (
        env.state["orders"][oid]["date"] == "2025-06-21"
        and env.state["hotels"]["H_GYM"]["products"][0]["quantity"] == 2
    )
    env.call("pay_hotel_order", {"order_id": oid})
    assert json.loads(env.call("search_hotel_order", {"user_id": "U_SAMPLE_01"}))[0]["status"] == "paid"
    env.call("cancel_hotel_order", {"order_id": oid, "user_id": "U_SAMPLE_01"})
    assert env.state["hotels"]["H_GYM"]["products"][0]["quantity"] == 3

    env = env_for(sample, "U_SAMPLE_02_T2")
    trains = json.loads(
        env.call("train_ticket_search", {"departure": "Hangzhou", "destination": "Shanghai", "date": "2025-07-05"})
    )
    assert {t["train_id"] for t in trains} == {"T_G7501", "T_K1"}
    env.call(
        "create_train_order",
        {
            "train_id": "T_G7501",
            "seat_id": "SEAT_G7501_2",
            "user_id": "U_SAMPLE_02",
            "date": "2025-07-05",
            "quantity": 2,
        },
    )
    (oid,) = env.state["orders"]
    assert env.state["orders"][oid]["total_price"] == 146
    with pytest.raises(ToolError, match="is for 2025-07-05"):
        env.call(
            "create_train_order",
            {
                "train_id": "T_G7501",
                "seat_id": "SEAT_G7501_2",
                "user_id": "U_SAMPLE_02",
                "date": "2025-07-06",
                "quantity": 1,
            },
        )
    env.call("modify_train_order", {"order_id": oid, "user_id": "U_SAMPLE_02", "new_date": "2025-07-06"})
    products = {p["product_id"]: p["quantity"] for p in env.state["trains"]["T_G7501"]["products"]}
    assert env.state["orders"][oid]["date"] == "2025-07-06" and products == {
        "SEAT_G7501_2": 20,
        "SEAT_G7501_1": 5,
        "SEAT_G7501_2B": 18,
    }
    env.call("pay_train_order", {"order_id": oid})
    assert json.loads(env.call("get_train_order_detail", {"order_id": oid}))["status"] == "paid"
    env.call("cancel_train_order", {"order_id": oid, "user_id": "U_SAMPLE_02"})
    assert env.state["orders"][oid]["status"] == "cancelled"


def test_general_tools(sample):
    env = env_for(sample, "U_SAMPLE_01_T1")
    assert "sunny" in env.call(
        "weather", {"address": "Hangzhou", "date_start": "2025-06-10", "date_end": "2025-06-10"}
    )
    assert "Dragon Boat" in env.call("get_date_holiday_info", {"date": "2025-05-31"})
    assert "workday" in env.call("get_date_holiday_info", {"date": "2025-06-10"})
    assert "2025-10-01" in env.call("get_holiday_date", {"year": "2025", "holiday_name": "National Day"})
    lon, lat = json.loads(env.call("address_to_longitude_latitude", {"address": "Xixi Center"}))
    near = json.loads(env.call("get_nearby", {"longitude": lon, "latitude": lat, "range": 1000}))
    assert {n["id"] for n in near} == {"S_NOODLE", "S_BURGER"}
    assert float(
        env.call(
            "longitude_latitude_to_distance",
            {"longitude1": 120.0, "latitude1": 30.0, "longitude2": 120.0, "latitude2": 30.01},
        )
    ) == pytest.approx(1112, abs=2)
    assert json.loads(env.call("get_user_all_orders", {})) == {"orders": [], "reservations": [], "books": []}


def test_environment_is_a_copy(sample):
    st = sample["U_SAMPLE_01_T2"]
    env = Environment(st.environment, st.domains)
    env.call("create_instore_product_order", {"user_id": "U_SAMPLE_01", "shop_id": "I_QUIET", "product_id": "IP_SET2"})
    assert "orders" not in st.environment or not st.environment["orders"]
    assert env.state["orders"]


@pytest.mark.realdata
def test_vitabench_expected_orders_replay_through_tools(vitabench_root):
    """Each real task's required delivery / in-store product orders can be placed with the tools."""
    placed, inconsistent = 0, []
    for task in load_tasks(vitabench_root, "english"):
        st = task.subtasks[0]
        env = Environment(st.environment, st.domains)
        before, placed_here = set(env.state["orders"]), 0
        for state in st.evaluation_criteria.expected_states:
            for order in state.required_orders:
                if any(p.get("product_id", "?") not in json.dumps(st.environment) for p in order.get("products", [])):
                    inconsistent.append(task.id)  # official data: expected product absent from the environment
                    continue
                if order.get("order_type") == "delivery":
                    products = order["products"]
                    env.call(
                        "create_delivery_order",
                        {
                            "user_id": env.user_id,
                            "store_id": order["store_id"],
                            "product_ids": [p["product_id"] for p in products],
                            "product_cnts": [p["quantity"] for p in products],
                            "address": (order.get("location") or {}).get("address", ""),
                            "dispatch_time": env.now,
                            "attributes": [p.get("attributes", "") for p in products],
                        },
                    )
                elif order.get("order_type") == "instore":
                    p = order["products"][0]
                    env.call(
                        "create_instore_product_order",
                        {
                            "user_id": env.user_id,
                            "shop_id": order["store_id"],
                            "product_id": p["product_id"],
                            "quantity": p["quantity"],
                        },
                    )
                else:
                    continue
                placed_here += 1
        created = [o for k, o in env.public_state()["orders"].items() if k not in before]
        assert len(created) == placed_here and all(o["status"] == "unpaid" for o in created), task.id
        placed += placed_here
    assert placed > 0 and len(inconsistent) <= 0.05 * placed, inconsistent
