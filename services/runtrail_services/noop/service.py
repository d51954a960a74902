"""``noop``: consumes, decodes, upcasts, validates and commits — and does nothing else.

It is the benchmark baseline of the runtime's own cost. With the option ``output=PATH`` it
appends one line per event (``eventId partition offset``) and fsyncs at each flush, which
gives the reliability tests a durable output to check for missing events after a SIGKILL.
A write or fsync that fails (disk full, file too large, I/O error) raises
:class:`~runtrail.runtime.unavailable.StoreUnavailable`: the bytes not yet written stay held
and the runtime retries the flush, so the file never holds a line twice or a torn line.
Lines of partitions revoked or lost before their flush are dropped: their events are read
again from where the output was durable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from runtrail.runtime import Delivered, Partition, Service, ServiceContext
from runtrail.runtime.store_errors import unavailable_on_store_errors
from runtrail_services.noop.settings import NoopSettings


class NoopService(Service):
    name = "noop"
    reads_written = False  # events built straight from the bytes on the compiled path
    default_port = 9400

    def __init__(self, context: ServiceContext) -> None:
        super().__init__(context)
        path = NoopSettings.load(context.options).output
        self._what = f"noop output {path}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None
        #: lines processed, not yet flushed, per partition
        self._pending: dict[Partition, list[str]] = {}
        #: encoded lines not yet (completely) written: a short write leaves the rest here
        self._unwritten = b""
        self._unsynced = False

    def process(self, batch: Sequence[Delivered]) -> None:
        if self._fd is not None:
            pending = self._pending
            for d in batch:
                line = f"{d.event.event_id} {d.partition} {d.offset}\n"
                pending.setdefault((d.topic, d.partition), []).append(line)

    def flush(self) -> None:
        if self._fd is None or not (self._pending or self._unwritten or self._unsynced):
            return
        if self._pending:
            self._unwritten += "".join("".join(ls) for ls in self._pending.values()).encode()
            self._pending.clear()
        unavailable_on_store_errors(self._what, self._write_all)

    def on_revoked(self, partitions: Sequence[Partition]) -> None:
        for tp in partitions:
            self._pending.pop(tp, None)

    def _write_all(self) -> None:
        assert self._fd is not None
        while self._unwritten:
            written = os.write(self._fd, self._unwritten)
            self._unwritten = self._unwritten[written:]
            self._unsynced = True
        os.fsync(self._fd)
        self._unsynced = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
