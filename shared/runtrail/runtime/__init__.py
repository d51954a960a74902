"""The consumer runtime every runtrail service runs on.

Transport (confluent-kafka consumer, rebalance callbacks, commits) lives in :mod:`.runner`;
decoding and dead-lettering in :mod:`.decoding` and :mod:`.deadletter`; per-run sequence
checks in :mod:`.sequencing`; the service contract in :mod:`.service`; metrics and health in
:mod:`.metrics` and :mod:`.http`.
"""

from runtrail.runtime.delivery import Delivered, Partition
from runtrail.runtime.service import Service, ServiceContext

__all__ = ["Delivered", "Partition", "Service", "ServiceContext"]
