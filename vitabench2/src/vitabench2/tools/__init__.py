"""Domain environments and tools: delivery, in-store and OTA (travel), plus the general tools.

Official code meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/environment/toolkit.py` and `src/vita/domains/{delivery,instore,ota}/tools.py`. Each subtask gets a fresh
`Environment` built from its `environment` dict; WRITE tools change `Environment.state` (orders, reservations,
books, stock), which the outcome check and the tests read back.
"""

import copy
import random

from .base import BaseTools, ToolError, sanitize, tool_schema
from .delivery import DeliveryTools
from .instore import InStoreTools
from .ota import OTA_KINDS, OTATools


class Environment(DeliveryTools, InStoreTools, OTATools):
    """The tools of one subtask's environment.

    Args:
        environment (`dict`): the subtask's `environment` (deep-copied; the task is never mutated).
        domains (`list[str]`): which domain toolkits to expose (`delivery`, `instore`, `ota`); general tools always.
        holidays (`str`, *optional*, defaults to `"official"`), shuffle_search (`random.Random`, *optional*): see
            [`BaseTools`].
    """

    def __init__(
        self,
        environment: dict,
        domains: list[str],
        holidays: str = "official",
        shuffle_search: random.Random | None = None,
    ):
        for d in domains:
            if d not in DOMAIN_TOOLS:
                raise ValueError(f"Unknown domain {d!r}; valid: {sorted(DOMAIN_TOOLS)}")
        super().__init__(environment, holidays, shuffle_search)
        self.domains = list(domains)
        names = list(GENERAL_TOOLS)
        for d in domains:
            names += [n for n in DOMAIN_TOOLS[d] if n not in names]
        self.tools = {n: getattr(self, n) for n in names}

    def public_state(self) -> dict:
        """A copy of the orders, reservations and books (what the tests and records read)."""
        return {
            "orders": copy.deepcopy(self.state["orders"]),
            "reservations": copy.deepcopy(self.state["reservations"]),
            "books": copy.deepcopy(self.state["books"]),
        }


GENERAL_TOOLS = BaseTools.GENERAL_TOOLS
DOMAIN_TOOLS = {
    "delivery": DeliveryTools.DELIVERY_TOOLS,
    "instore": InStoreTools.INSTORE_TOOLS,
    "ota": OTATools.OTA_TOOLS,
}
# WRITE tools whose calls the optional outcome check inspects (official `outcome_evaluator.WRITE_TOOLS`).
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
    n
    for names in DOMAIN_TOOLS.values()
    for n in names
    if n.split("_")[0] in ("create", "pay", "cancel", "modify")
    or n.startswith(("instore_book", "instore_reservation", "instore_cancel", "instore_modify"))
)

__all__ = [
    "DOMAIN_TOOLS",
    "Environment",
    "GENERAL_TOOLS",
    "OTA_KINDS",
    "OUTCOME_WRITE_TOOLS",
    "ToolError",
    "WRITE_TOOLS",
    "sanitize",
    "tool_schema",
]
