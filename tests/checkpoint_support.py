"""Reading a service's commit state through its checkpoint, without a runtime.

The runtime asks the checkpoint what to commit right after the service's flush; these helpers
do the same, so a test sees what the runtime would commit."""

from __future__ import annotations

from collections.abc import Sequence

from runtrail.runtime import Partition, Service
from runtrail.runtime.checkpoint import NOTHING_COMMITTED, Committed


def held(service: Service, *, flush: bool = True) -> dict[Partition, int]:
    """Flush (unless the test just did), then the offset the service holds per partition:
    the commit stops there."""
    if flush:
        service.flush()
    return {tp: offset for tp, (offset, _) in service.context.checkpoint.holds().items()}


def held_metadata(service: Service) -> dict[Partition, str]:
    """Flush, then the commit metadata of each hold that has some."""
    service.flush()
    return {tp: meta for tp, (_, meta) in service.context.checkpoint.holds().items() if meta}


class GroupCommits(dict[Partition, Committed]):
    """A consumer group's commits, for a checkpoint built without a broker: fill it, then let
    the service read it at assignment (partitions absent have nothing committed)."""

    def __call__(self, partitions: Sequence[Partition]) -> dict[Partition, Committed]:
        return {tp: self.get(tp, (NOTHING_COMMITTED, None)) for tp in partitions}


def assign(service: Service, partitions: Sequence[Partition]) -> dict[Partition, int]:
    """Assign as the runtime does; the start offsets the service gave the checkpoint."""
    checkpoint = service.context.checkpoint
    checkpoint.assigned(partitions)
    service.on_assigned(partitions)
    return checkpoint.starts(partitions)
