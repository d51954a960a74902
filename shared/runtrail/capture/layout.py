"""Where records go: ``<tenant>/<yyyy-mm-dd>/…`` by tenant and the record's capture date.

The same layout serves the file sink (directories) and object stores (key prefixes), so a
directory can be synced to a bucket and read back unchanged. A tenant ID becomes one path
segment, percent-encoded, so no tenant can name a path outside its own (``..``, ``/``).
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import quote, unquote

from runtrail.capture.record import NodeIoRecord
from runtrail.capture.times import utc_date


@lru_cache(maxsize=4096)  # once per tenant, not per record: ``quote`` is pure Python
def tenant_segment(tenant_id: str) -> str:
    """A tenant ID as one safe, reversible path segment."""
    segment = quote(tenant_id, safe="")
    return "%2E" + segment[1:] if segment.startswith(".") else segment


def tenant_from_segment(segment: str) -> str:
    """The tenant ID a path segment was made from."""
    return unquote(segment)


def partition_dir(record: NodeIoRecord) -> tuple[str, str]:
    """``(tenant segment, yyyy-mm-dd)`` of a record, by its capture time (UTC)."""
    return tenant_segment(record.tenant_id), utc_date(record.captured_at_epoch_ms)
