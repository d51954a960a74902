"""In-memory sink (seed 000 §1.6): for tests and ad-hoc analysis, queryable by node type."""

from __future__ import annotations

from collections.abc import Sequence

from runtrail.capture.record import NodeIoRecord, NodeType


class InMemoryIoCaptureSink:
    """Keeps every record once (by recordId, first write wins), in write order."""

    def __init__(self) -> None:
        self._records: dict[str, NodeIoRecord] = {}

    def write(self, records: Sequence[NodeIoRecord]) -> None:
        for record in records:
            self._records.setdefault(record.record_id, record)

    def flush(self) -> None:
        """Nothing to do: memory is as durable as this sink gets."""

    def close(self) -> None:
        """Nothing to release; records stay queryable."""

    def records(self, node_type: NodeType | None = None) -> list[NodeIoRecord]:
        """All records, or those of one node type."""
        if node_type is None:
            return list(self._records.values())
        return [r for r in self._records.values() if r.node_type == node_type]

    def get(self, record_id: str) -> NodeIoRecord | None:
        """One record by its ID."""
        return self._records.get(record_id)

    def __len__(self) -> int:
        return len(self._records)


def open_url(url: str) -> InMemoryIoCaptureSink:
    """``memory://``: a new, empty sink (the URL carries nothing else)."""
    del url
    return InMemoryIoCaptureSink()
