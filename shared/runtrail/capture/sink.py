"""The one interface every capture sink implements, and the URL that picks one.

The sinks, named in the table of :mod:`runtrail.persistence.kinds`: ``memory://``
(:mod:`.memory_sink`), ``file:///dir`` (:mod:`.file_sink`) and every object store scheme obstore
knows (:mod:`.object_sink`).

The consumer runtime writes records as they close, calls ``flush`` before committing offsets
(after ``flush`` returns, everything written is durable), and ``close`` on shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from runtrail.capture.record import NodeIoRecord


class CaptureSink(Protocol):
    """Where node records go."""

    def write(self, records: Sequence[NodeIoRecord]) -> None:
        """Accept records; they may be buffered until ``flush``."""

    def flush(self) -> None:
        """Make every record written so far durable."""

    def close(self) -> None:
        """Flush and release resources; the sink is unusable afterwards."""
