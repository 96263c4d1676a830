"""What each tool's schema tells the agent: a description, when to use it (precondition), what comes next
(postcondition), what it returns, and a line per argument.

The information is the official one, written in our words: meituan-longcat/VitaBench-2.0 @
f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/environment/toolkit_schema.py` and
`src/vita/domains/{delivery,instore,ota}/tools_schema.py` (`TOOL_DESCRIPTIONS_EN`), which
`src/vita/utils/schema_utils.py` renders as the description, `Preconditions:`, `Postconditions:`, `Args:` and
`Returns:`. Where the official argument names differ from the signature (`food_ids` for `product_ids`), the
signature's name is documented.
"""

# Arguments documented the same way in every tool that takes them.
COMMON_ARGS = {
    "user_id": "The user's id",
    "order_id": "Order id",
    "store_id": "Delivery store id",
    "shop_id": "In-store shop (merchant) id",
    "keywords": "Words describing what is wanted, taken from the user's request",
    "key_words": "Search words matched against names, descriptions, addresses and features",
    "city_name": "City name",
    "departure": "Departure city",
    "destination": "Destination city",
    "quantity": "How many",
    "date": "Date, YYYY-MM-DD",
    "status": "Order status to filter on",
    "new_date": "New departure date, YYYY-MM-DD",
    "hotel_id": "Hotel id",
    "attraction_id": "Attraction id",
    "flight_id": "Flight id",
    "train_id": "Train id",
    "taxi_id": "Taxi service id",
    "seat_id": "Seat (product) id",
    "book_id": "Table booking id",
    "reservation_id": "Service reservation id",
    "address": "Address to look up",
}

_PAY = "Payment result"
_CANCEL_REFUND = "Refund amount of the cancellation"

# name -> (description, precondition, postcondition, returns, argument docs beyond COMMON_ARGS)
TOOL_DOCS: dict[str, tuple[str, str, str, str, dict]] = {
    # ------------------------------------------------------------------ general
    "longitude_latitude_to_distance": (
        "Distance in metres between two points given by longitude and latitude",
        "Two points' coordinates are known",
        "The distance between them",
        "Distance in metres",
        {
            "longitude1": "Longitude of the first point",
            "latitude1": "Latitude of the first point",
            "longitude2": "Longitude of the second point",
            "latitude2": "Latitude of the second point",
        },
    ),
    "weather": (
        "Weather at an address between two dates",
        "The weather of a place over a date range is needed",
        "The weather, one line per day",
        "Weather per day",
        {"address": "Address or city", "date_start": "First day, YYYY-MM-DD", "date_end": "Last day, YYYY-MM-DD"},
    ),
    "address_to_longitude_latitude": (
        "Longitude and latitude of an address",
        "The coordinates of an address are needed",
        "Its coordinates",
        "[longitude, latitude]",
        {},
    ),
    "get_date_holiday_info": (
        "Whether a date is a Chinese public holiday, and its name if so",
        "It matters whether a date is a holiday",
        "The holiday's name, or that the date is not a holiday",
        "Holiday name or a not-a-holiday message",
        {"date": "Date, YYYY-MM-DD"},
    ),
    "get_holiday_date": (
        "The date of a holiday or festival in a given year",
        "The calendar date of a named holiday is needed",
        "Its date",
        "Date, YYYY-MM-DD",
        {"year": "Year, e.g. 2025", "holiday_name": "Holiday name, in English"},
    ),
    "get_user_all_orders": (
        "Every order of the current user",
        "The user's existing orders are needed",
        "All orders",
        "One order per line",
        {},
    ),
    "get_nearby": (
        "Every place (stores, shops, hotels, attractions, airports and stations with their flights and trains) "
        "within a range of a point",
        "Places near a known point are wanted",
        "The places found, one header per line",
        "One place per line",
        {"longitude": "Longitude of the point", "latitude": "Latitude of the point", "range": "Radius in metres"},
    ),
    # ------------------------------------------------------------------ delivery
    "delivery_distance_to_time": (
        "Delivery time in minutes for a distance in metres",
        "The store-to-address distance is known",
        "The delivery time",
        "Minutes",
        {"distance": "Distance in metres"},
    ),
    "get_delivery_store_info": (
        "A delivery store's details: id, score, address and coordinates, tags and its products",
        "A delivery store's details are needed",
        "The store's details",
        "The store with its products",
        {},
    ),
    "get_delivery_product_info": (
        "A delivery product's details: name, id, store name and id, price, tags",
        "A delivery product's details are needed",
        "The product's details",
        "The product",
        {"product_id": "Product id"},
    ),
    "delivery_store_search_recommand": (
        "Search or recommend delivery stores from keywords drawn from the user's request",
        "Food delivery; keywords describing the store are known",
        "A list of stores: help the user choose one",
        "One store per line",
        {"keywords": "Words describing the store"},
    ),
    "delivery_product_search_recommand": (
        "Search or recommend delivery products from keywords drawn from the user's request",
        "Food delivery; keywords describing the food are known",
        "A list of products: help the user choose and then create the order",
        "One product per line",
        {"keywords": "Words describing the food"},
    ),
    "create_delivery_order": (
        "Create a delivery order at one store, with one or more of its products",
        "Food delivery; exactly one store and its product ids are settled; the user's dietary restrictions are "
        "known and go into the order",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order, or why it could not be created",
        {
            "product_ids": "Product ids",
            "product_cnts": "Quantity of each product, in the order of product_ids",
            "address": "Delivery address",
            "dispatch_time": "When the rider leaves the store with the food, YYYY-MM-DD HH:MM:SS",
            "attributes": "Specification of each product (size, spice level, ...), in the order of product_ids",
            "note": "Order note, e.g. dietary restrictions; never put time requirements here",
        },
    ),
    "pay_delivery_order": (
        "Pay a delivery order",
        "The order is created and the user confirms payment (or asks to pay again)",
        "The payment result",
        _PAY,
        {},
    ),
    "get_delivery_order_status": (
        "Status of a delivery order",
        "A delivery order's status is needed",
        "Its status",
        "Order status",
        {},
    ),
    "cancel_delivery_order": (
        "Cancel a delivery order, or its payment; an already cancelled order cannot be cancelled",
        "The order exists and is not cancelled",
        "The cancellation result",
        "Cancellation result",
        {},
    ),
    "modify_delivery_order": (
        "Change a delivery order's note",
        "One delivery order is settled and the user wants its note changed",
        "The changed order; if it is unpaid, the user confirms payment",
        "Result of the change",
        {"note": "New note"},
    ),
    "search_delivery_orders": (
        "The user's delivery orders with a given status: id, type, user, store, total price, times, status",
        "The user's delivery orders are needed",
        "The matching orders",
        "One order per line",
        {"status": "Order status (default unpaid)"},
    ),
    "get_delivery_order_detail": (
        "A delivery order's details: id, type, store, dispatch, shipping and delivery times, total price, times, "
        "status and products",
        "One delivery order is settled",
        "Its details",
        "The order with its products",
        {},
    ),
    # ------------------------------------------------------------------ in-store
    "instore_shop_search_recommend": (
        "Recommend in-store shops from keywords when the user has no specific shop or package in mind, matching "
        "the user's preferences to the shops' tags",
        "In-store services; keywords describing the shop are known",
        "A list of shops: help the user choose a shop, then a package",
        "One shop per line",
        {"keywords": "Words describing the shop"},
    ),
    "instore_product_search_recommend": (
        "Search or recommend in-store packages from keywords drawn from the user's request",
        "In-store services; keywords describing the package are known",
        "A list of packages: help the user choose and then create the order",
        "One package per line",
        {"keywords": "Words describing the package"},
    ),
    "create_instore_product_order": (
        "Buy an in-store package",
        "In-store services; one shop and its package are settled",
        "The new (unpaid) order with its id: ask the user to confirm payment",
        "The order",
        {"product_id": "Package (product) id", "quantity": "Number of packages"},
    ),
    "pay_instore_order": (
        "Pay an in-store order",
        "The order is created and the user confirms payment (or asks to pay again)",
        "The payment result",
        _PAY,
        {},
    ),
    "instore_cancel_order": (
        "Cancel an in-store order, or its payment; an already cancelled order cannot be cancelled",
        "The order exists and is not cancelled",
        "The cancellation result",
        "Cancellation result",
        {},
    ),
    "instore_book": (
        "Book a table or seat at a shop",
        "One shop is settled and it takes table bookings",
        "The booking with its id; if it costs a deposit, ask the user to confirm payment",
        "The booking",
        {"time": "Booking time, YYYY-MM-DD HH:MM:SS", "customer_count": "Number of people (default 1)"},
    ),
    "pay_instore_book": (
        "Pay a table booking's deposit",
        "One booking is settled",
        "The payment result",
        _PAY,
        {},
    ),
    "instore_cancel_book": (
        "Cancel a table booking",
        "One booking is settled",
        "The cancellation result",
        "Cancellation result",
        {},
    ),
    "instore_reservation": (
        "Reserve a service time slot at a shop",
        "One shop is settled and it takes reservations",
        "The reservation with its id: tell the user to arrive at the agreed time",
        "The reservation",
        {"time": "Service time, YYYY-MM-DD HH:MM:SS", "customer_count": "Number of people (default 1)"},
    ),
    "instore_modify_reservation": (
        "Change a reservation's time and number of people",
        "The reservation to change is settled (look it up first)",
        "The changed reservation: tell the user to arrive at the agreed time",
        "The reservation",
        {"time": "New time, YYYY-MM-DD HH:MM:SS", "customer_count": "New number of people"},
    ),
    "instore_cancel_reservation": (
        "Cancel a reservation",
        "One reservation is settled",
        "The cancellation result",
        "Cancellation result",
        {},
    ),
    "get_instore_orders": (
        "Every in-store order of a user",
        "The user's in-store orders are needed",
        "All of them",
        "One order per line",
        {},
    ),
    "get_instore_reservations": (
        "Every reservation of a user",
        "The user's reservations are needed",
        "All of them",
        "One reservation per line",
        {},
    ),
    "get_instore_books": (
        "Every table booking of a user",
        "The user's bookings are needed",
        "All of them",
        "One booking per line",
        {},
    ),
    "search_instore_book": (
        "A user's table bookings: all of them, or the one with book_id",
        "The user's bookings are needed, e.g. to change or cancel one",
        "The bookings found",
        "One booking per line",
        {"book_id": "Booking id (optional: all bookings without it)"},
    ),
    "search_instore_reservation": (
        "A user's reservations: all of them, or the one with reservation_id",
        "The user's reservations are needed, e.g. to change or cancel one",
        "The reservations found",
        "One reservation per line",
        {"reservation_id": "Reservation id (optional: all reservations without it)"},
    ),
    # ------------------------------------------------------------------ OTA
    "get_ota_hotel_info": (
        "A hotel's details: id, name, score, stars, address, tags and rooms",
        "A hotel's details are needed",
        "The hotel with its rooms: help the user choose a room and order",
        "The hotel",
        {},
    ),
    "get_ota_attraction_info": (
        "An attraction's details: id, name, address, description, score, opening hours, ticket price and tickets",
        "An attraction's details are needed",
        "The attraction with its tickets: help the user choose tickets and order",
        "The attraction",
        {},
    ),
    "get_ota_flight_info": (
        "A flight's details: id, number, cities, airports, times, tags and seats",
        "A flight's details are needed",
        "The flight with its seats: help the user choose seats and order",
        "The flight",
        {},
    ),
    "get_ota_train_info": (
        "A train's details: id, number, cities, stations, times, tags and seats",
        "A train's details are needed",
        "The train with its seats: help the user choose seats and order",
        "The train",
        {},
    ),
    "hotel_search_recommand": (
        "Hotels in a city ranked by keywords: id, name, score, stars, address, tags (no rooms)",
        "The user wants a hotel and gives a place or keywords",
        "A list of hotels; rooms and prices come from get_ota_hotel_info",
        "One hotel per line",
        {},
    ),
    "attractions_search_recommend": (
        "Attractions in a city ranked by keywords: id, name, address, description, score, opening hours (no tickets)",
        "The user wants an attraction and gives a place or keywords",
        "A list of attractions; tickets and prices come from get_ota_attraction_info",
        "One attraction per line",
        {},
    ),
    "flight_search_recommend": (
        "Flights between two cities: id, number, cities, airports, times, tags (no seats)",
        "The user wants a flight and gives the cities",
        "A list of flights; seats, prices and dates come from get_ota_flight_info",
        "One flight per line",
        {},
    ),
    "train_ticket_search": (
        "Trains between two cities with seats on a date: id, number, cities, stations, times, tags (no seats)",
        "The user wants a train and gives the cities and date",
        "A list of trains; seats and prices come from get_ota_train_info",
        "One train per line",
        {"date": "Departure date, YYYY-MM-DD"},
    ),
    "create_hotel_order": (
        "Order a hotel room",
        "The user's id, the hotel and a room with availability on the wanted date are settled",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order",
        {"room_id": "Room (product) id"},
    ),
    "create_attraction_order": (
        "Order attraction tickets for a date",
        "The attraction, ticket and visit date are settled",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order",
        {"ticket_id": "Ticket (product) id", "date": "Visit date, YYYY-MM-DD"},
    ),
    "create_flight_order": (
        "Order flight tickets for a seat type",
        "The flight, seat and date are settled",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order",
        {"date": "Departure date, YYYY-MM-DD"},
    ),
    "create_train_order": (
        "Order train tickets for a seat type",
        "The train, seat and date are settled",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order",
        {"date": "Departure date, YYYY-MM-DD"},
    ),
    "pay_hotel_order": ("Pay a hotel order", "The order id is settled", "The order is paid", _PAY, {}),
    "pay_attraction_order": ("Pay an attraction order", "The order id is settled", "The order is paid", _PAY, {}),
    "pay_flight_order": ("Pay a flight order", "The order id is settled", "The order is paid", _PAY, {}),
    "pay_train_order": ("Pay a train order", "The order id is settled", "The order is paid", _PAY, {}),
    "search_hotel_order": (
        "A user's hotel orders: id, type, user, hotel, total price, times, status",
        "The user's hotel orders are needed",
        "The orders found, e.g. to change or cancel one",
        "One order per line",
        {"status": "Order status (default paid)"},
    ),
    "search_attraction_order": (
        "A user's attraction orders: id, type, user, attraction, total price, times, status",
        "The user's attraction orders are needed",
        "The orders found, e.g. to change or cancel one",
        "One order per line",
        {"status": "Order status (default paid)"},
    ),
    "search_flight_order": (
        "A user's flight orders: id, type, user, flight, total price, times, status",
        "The user's flight orders are needed",
        "The orders found, e.g. to change or cancel one",
        "One order per line",
        {"status": "Order status (default paid)"},
    ),
    "search_train_order": (
        "A user's train orders: id, type, user, train, total price, times, status",
        "The user's train orders are needed",
        "The orders found, e.g. to change or cancel one",
        "One order per line",
        {"status": "Order status (default paid)"},
    ),
    "get_hotel_order_detail": (
        "A hotel order's details, with its room (type, date, price, id)",
        "The order id is settled",
        "Its details",
        "The order",
        {},
    ),
    "get_attraction_order_detail": (
        "An attraction order's details, with its tickets (type, date, price, id)",
        "The order id is settled",
        "Its details",
        "The order",
        {},
    ),
    "get_flight_order_detail": (
        "A flight order's details, with its seats (type, date, price, id)",
        "The order id is settled",
        "Its details",
        "The order",
        {},
    ),
    "get_train_order_detail": (
        "A train order's details, with its seats (type, date, price, id)",
        "The order id is settled",
        "Its details",
        "The order",
        {},
    ),
    "modify_train_order": (
        "Move a paid train order to another date, settling the price difference",
        "The order id is settled and the user wants another date",
        "The order moves; if it costs more it becomes unpaid and the user pays the difference, else the difference "
        "is refunded",
        "The result and the price difference (positive: to pay, negative: refunded)",
        {},
    ),
    "modify_flight_order": (
        "Move a paid flight order to another date, settling the price difference",
        "The order id is settled and the user wants another date",
        "The order moves; if it costs more it becomes unpaid and the user pays the difference, else the difference "
        "is refunded",
        "The result and the price difference (positive: to pay, negative: refunded)",
        {},
    ),
    "cancel_hotel_order": (
        "Cancel a hotel order",
        "The order id is settled and belongs to the user",
        "The order is cancelled; tell the user any refund",
        _CANCEL_REFUND,
        {},
    ),
    "cancel_attraction_order": (
        "Cancel an attraction order",
        "The order id is known (from the conversation or a search) and belongs to the user",
        "Tell the user any refund",
        _CANCEL_REFUND,
        {},
    ),
    "cancel_flight_order": (
        "Cancel a flight order",
        "The order id is known (from the conversation or a search) and belongs to the user",
        "Tell the user any refund",
        _CANCEL_REFUND,
        {},
    ),
    "cancel_train_order": (
        "Cancel a train order",
        "The order id is known (from the conversation or a search) and belongs to the user",
        "Tell the user any refund",
        _CANCEL_REFUND,
        {},
    ),
    "get_taxi_info": (
        "A taxi service's details: id, type, platform, pick-up and drop-off, estimated duration and price, tags "
        "and vehicle options",
        "A taxi service's details are needed",
        "The service with its options: help the user choose a vehicle and order",
        "The taxi service",
        {},
    ),
    "taxi_search": (
        "Taxi services between two places: id, type, platform, places, estimated duration and price, tags",
        "The user wants a ride and gives where from and where to",
        "A list of services; options come from get_taxi_info",
        "One service per line",
        {"departure_location": "Pick-up place", "arrival_location": "Drop-off place"},
    ),
    "create_taxi_order": (
        "Order a ride with a taxi service's vehicle option",
        "The service and vehicle option are settled",
        "The new (unpaid) order: ask the user to confirm payment",
        "The order",
        {"product_id": "Vehicle option (product) id"},
    ),
    "pay_taxi_order": ("Pay a taxi order", "The order id is settled", "The order is paid", _PAY, {}),
    "cancel_taxi_order": (
        "Cancel a taxi order",
        "The order id is known (from the conversation or a search) and belongs to the user",
        "Tell the user any refund",
        _CANCEL_REFUND,
        {},
    ),
    "search_taxi_order": (
        "A user's taxi orders: id, type, user, service, total price, times, status",
        "The user's taxi orders are needed",
        "The orders found, e.g. to cancel one",
        "One order per line",
        {"status": "Order status (default paid)"},
    ),
    "get_taxi_order_detail": (
        "A taxi order's details, with its ride",
        "The order id is settled",
        "Its details",
        "The order",
        {},
    ),
}


def tool_description(name: str) -> str:
    """The schema description: what the tool does, then its precondition, postcondition and return value."""
    description, pre, post, returns, _ = TOOL_DOCS[name]
    return f"{description}.\nPreconditions: {pre}.\nPostconditions: {post}.\nReturns: {returns}."


def argument_doc(name: str, argument: str) -> str:
    return TOOL_DOCS[name][4].get(argument) or COMMON_ARGS[argument]
