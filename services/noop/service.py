"""``noop``: consumes, decodes, upcasts, validates and commits — and does nothing else.

It is the benchmark baseline of the runtime's own cost. With the option ``output=PATH`` it
appends one line per event (``eventId partition offset``) and fsyncs at each flush, which
gives the reliability tests a durable output to check for missing events after a SIGKILL.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from runtrail.runtime import Delivered, Service, ServiceContext


class NoopService(Service):
    name = "noop"
    default_port = 9400

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        path = context.options.get("output")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None
        self._buffer: list[str] = []

    def process(self, batch: Sequence[Delivered]) -> None:
        if self._fd is not None:
            self._buffer.extend(f"{d.event.event_id} {d.partition} {d.offset}\n" for d in batch)

    def flush(self) -> None:
        if self._fd is not None and self._buffer:
            os.write(self._fd, "".join(self._buffer).encode())
            os.fsync(self._fd)
            self._buffer.clear()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
