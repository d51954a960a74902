"""The one interface every capture sink implements, and the URL that picks one.

The consumer runtime writes records as they close, calls ``flush`` before committing offsets
(after ``flush`` returns, everything written is durable), and ``close`` on shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from runtrail.capture.record import NodeIoRecord


class CaptureSink(Protocol):
    """Where node records go."""

    def write(self, records: Sequence[NodeIoRecord]) -> None:
        """Accept records; they may be buffered until ``flush``."""

    def flush(self) -> None:
        """Make every record written so far durable."""

    def close(self) -> None:
        """Flush and release resources; the sink is unusable afterwards."""


def open_sink(url: str, **options: Any) -> CaptureSink:
    """The sink for ``url``: ``memory://``, ``file:///dir`` or an object store URL.

    Object store URLs are every scheme obstore knows (``s3://bucket/prefix``, ``gs://``,
    ``az://``…); their options come from the URL's query and the environment. Keyword options
    override query parameters.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from runtrail.capture.memory_sink import InMemoryIoCaptureSink

        return InMemoryIoCaptureSink()
    if scheme == "file":
        from runtrail.capture.file_sink import JsonlFileSink

        return JsonlFileSink.from_url(url, **options)
    from runtrail.capture.object_sink import ObjectStoreSink

    return ObjectStoreSink.from_url(url, **options)
