"""The consumer runtime every runtrail service runs on.

Transport (confluent-kafka consumer, rebalance callbacks, commits) lives in :mod:`.runner`;
decoding and dead-lettering in :mod:`.decoding` and :mod:`.deadletter`; per-run sequence
checks in :mod:`.sequencing`; the service contract in :mod:`.service`; metrics and health in
:mod:`.metrics` and :mod:`.http`.

The names below load on first use, so that importing one light submodule (``stop_signals``,
taken before a service's heavy imports) does not import the event model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtrail.runtime.delivery import Delivered, Partition
    from runtrail.runtime.service import Service, ServiceContext

__all__ = ["Delivered", "Partition", "Service", "ServiceContext"]

_HOMES = {
    "Delivered": "runtrail.runtime.delivery",
    "Partition": "runtrail.runtime.delivery",
    "Service": "runtrail.runtime.service",
    "ServiceContext": "runtrail.runtime.service",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'runtrail.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
