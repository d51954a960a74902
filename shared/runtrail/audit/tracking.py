"""The audit service's positions in the one tracking table (component ``audit``).

Both audit adapters record the offsets of a batch in the batch's transaction through here, so
a position that would move back is refused alike: as :class:`~runtrail.audit.errors.ChainConflict`,
the error the audit service already stops on (another writer moved on; heads and positions are
read again at restart). Sealed positions are kept under the events topic's name, published
ones under ``<topic>#published`` (see ``runtrail_services.audit.positions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtrail.audit.errors import ChainConflict
from runtrail.audit.store import TopicPartition
from runtrail.persistence.tracking import PositionRegressed, Tracking

#: The audit service's component name in the tracking table.
AUDIT_TRACKING = "audit"


def record_offsets(tracking: Tracking, cur: Any, offsets: Mapping[TopicPartition, int]) -> None:
    """Record next offsets in the caller's transaction; ChainConflict if one moves back."""
    try:
        tracking.record(cur, {(tp[0], tp[1]): offset for tp, offset in offsets.items()})
    except PositionRegressed as exc:
        raise ChainConflict(f"position refused by the store: {exc}") from exc
