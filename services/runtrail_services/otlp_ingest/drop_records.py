"""Where each OTLP ingest process writes what it did not record, per run (the drops store).

Two writers, one store (:mod:`runtrail.drops.store`, located by ``RUNTRAIL_OTLP_DROPS_STORE_URL``):

* :class:`ReceiverDrops` — a receiver's, once per request: what its mapping dropped (mode
  ``map``), the log records it refused. A store that fails does not fail the request (its
  spans are recorded; the counts stay in the metrics): it is logged, once per kind of error.
* :class:`MapperDrops` — the mapper's: each raw record's drops kept with the record's offset
  until the service's flush, written with it before the commit (a store that fails fails the
  flush: nothing commits, the runtime retries). Offsets make a replay count nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from runtrail.config import Settings
from runtrail.drops.first_seen import FirstSeen
from runtrail.drops.store import PositionedTally, SqlDropStore
from runtrail.drops.tally import DropTally
from runtrail.persistence import open_store, redact_url
from runtrail.persistence.kinds import OTLP_DROPS

log = logging.getLogger(__name__)


def open_drops(settings: Settings) -> SqlDropStore:
    url = settings.resolved_otlp_drops_url()
    log.info("otlp: drops recorded in %s", redact_url(url))
    return open_store(OTLP_DROPS, url)


class ReceiverDrops:
    """A receiver's writes: one per request with drops."""

    def __init__(self, store: SqlDropStore) -> None:
        self.store = store
        self._told = FirstSeen()

    def record(self, tenant: str, tally: DropTally) -> None:
        if not tally:
            return
        try:
            self.store.add(tenant, tally)
        except Exception as exc:
            if self._told.new([type(exc).__name__]):
                log.warning("otlp-ingest: drops not written to their store: %s", exc)

    def close(self) -> None:
        self.store.close()


class MapperDrops:
    """The mapper's drops per raw-topic partition, written at the flush."""

    def __init__(self, store: SqlDropStore, topic: str) -> None:
        self.store = store
        self.topic = topic
        self._pending: dict[int, list[PositionedTally]] = {}

    def add(self, partition: int, offset: int | None, tenant: str, tally: DropTally) -> None:
        """``tally`` decided at raw ``offset`` (None: by the clock, with no record)."""
        if tally:
            self._pending.setdefault(partition, []).append((offset, tenant, tally))

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drops of partitions gone to another mapper: it maps their records again."""
        for partition in partitions:
            self._pending.pop(partition, None)

    def flush(self) -> None:
        if self._pending:
            self.store.add_positioned(self.topic, self._pending)
            self._pending = {}

    def close(self) -> None:
        self.store.close()
