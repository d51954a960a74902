"""The consumer runtime every runtrail service runs on.

Transport (confluent-kafka consumer, rebalance callbacks, commits) lives in :mod:`.runner`;
decoding and dead-lettering in :mod:`.decoding` and :mod:`.deadletter`; per-run sequence
checks in :mod:`.sequencing`; the service contract in :mod:`.service`; metrics and health in
:mod:`.metrics` and :mod:`.http`.

The names below load on first use (:mod:`runtrail.lazy_exports`), so that importing one light submodule (``stop_signals``,
taken before a service's heavy imports) does not import the event model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.runtime.delivery import Delivered, Partition
    from runtrail.runtime.service import Service, ServiceContext

__getattr__ = lazy_exports(
    __name__, {".delivery": ("Delivered", "Partition"), ".service": ("Service", "ServiceContext")}
)

__all__ = ["Delivered", "Partition", "Service", "ServiceContext"]
