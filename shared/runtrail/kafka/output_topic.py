"""A producer for a service's output topic (audit, cache, sessions) that rides out outages.

Why: a service's output topic being down is not a problem with any event, so it must neither
stop the process nor lose or reorder a record. Each record is kept until the broker
acknowledged it. librdkafka retries for as long as it takes (``message.timeout.ms=0``) with an
idempotent producer, so nothing is written twice or out of order within the session; what the
broker has not acknowledged when :meth:`OutputTopic.confirm` times out surfaces as
:class:`~runtrail.runtime.unavailable.StoreUnavailable`, which makes the runtime report not
ready, commit nothing and retry. A record whose delivery definitively failed (a fatal producer
error, a full local queue) is re-produced, in its original order and before any newer record.

A record too large for the broker is not an outage: it is reported once to ``on_too_large``
(the service dead-letters the event behind it, reason ``too-large``) and dropped, and the
service goes on. The producers' ``message.max.bytes`` is what ``runtrail topics ensure`` sizes
the topics to (``max_event_bytes`` plus headroom), so a legal event's content fits.

The broker refuses a whole produce batch when it exceeds the topic's ``max.message.bytes``,
and librdkafka then reports the size error for every record in it, the small ones beside the
large one too. So a size error from the broker is first a suspicion: the record is produced
again alone, and only a second size error, for it alone, drops it. A record cleared this way
can land after records sent after it (they were in flight while the batch failed); losing it
would be worse.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from runtrail.config import Settings
from runtrail.kafka.producer_config import producer_config, too_large
from runtrail.kafka.topics import max_message_bytes
from runtrail.runtime.unavailable import StoreUnavailable

log = logging.getLogger(__name__)

#: How long a flush waits for acknowledgements before it reports the topic unavailable: long
#: enough for a healthy broker, short enough to stay within the runtime's shutdown bound.
CONFIRM_TIMEOUT_S = 10.0
#: The last chance at close: a flush before it may already have waited CONFIRM_TIMEOUT_S, and
#: both must fit in the runtime's shutdown bound (``shutdown_timeout_s``, 15 s by default).
CLOSE_TIMEOUT_S = 2.0
#: librdkafka's upper bound for ``message.max.bytes``.
_LIBRDKAFKA_MAX = 1_000_000_000

Headers = list[tuple[str, bytes]] | None
TooLargeFn = Callable[[Any, str], None]
ProducerFactory = Callable[[dict[str, Any]], Any]


def output_message_max_bytes(settings: Settings) -> int:
    """``message.max.bytes`` of output producers: what ``topics ensure`` sizes topics to."""
    return min(max_message_bytes(settings.max_event_bytes), _LIBRDKAFKA_MAX)


def output_producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """Idempotent, acks=all, never timing a record out, sized for the largest legal event;
    delivery reports for failures only (see :meth:`OutputTopic.confirm`)."""
    return producer_config(
        settings,
        **{
            "message.timeout.ms": 0,  # infinite: the broker coming back is the only way out
            "message.max.bytes": output_message_max_bytes(settings),
            # a success report per record was a Python callback per record (the audit
            # service sends one per event); a drained queue with no failure report says it
            "delivery.report.only.error": True,
            **overrides,
        },
    )


@dataclass(slots=True)
class _Record:
    key: bytes | None
    value: bytes | None
    headers: Headers
    tag: Any


class OutputTopic:
    """Send records to one topic; :meth:`confirm` says whether all are acknowledged."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        *,
        client_id: str,
        on_too_large: TooLargeFn | None = None,
        producer_factory: ProducerFactory = Producer,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self._config = output_producer_config(
            settings, **{"client.id": client_id, **(overrides or {})}
        )
        self._factory = producer_factory
        self._producer = producer_factory(self._config)
        self._on_too_large = on_too_large
        self._next_id = 0
        #: every record not yet confirmed, in the order it was sent (librdkafka reports
        #: failures only: what is here when the queue has drained with no report is delivered)
        self._unacked: dict[int, _Record] = {}
        #: records to produce again (or for the first time) once nothing is in flight
        self._retry: set[int] = set()
        #: records the broker refused as too large in a batch: produced again alone, and
        #: dropped only if refused again
        self._suspect: set[int] = set()
        self._errors: list[str] = []
        self._fatal = False
        #: records dropped as too large since the last confirm
        self.too_large = 0

    # --- sending ---------------------------------------------------------------------------
    def send(
        self, key: bytes | None, value: bytes | None, headers: Headers = None, tag: Any = None
    ) -> None:
        """Queue a record; never raises for an outage (``confirm`` reports it)."""
        rid = self._next_id
        self._next_id += 1
        self._unacked[rid] = _Record(key, value, headers, tag)
        if self._retry:  # an earlier record waits to be sent again: queue behind it
            self._retry.add(rid)
        else:
            self._produce(rid)

    def send_many(self, records: Iterable[tuple[bytes, bytes]], headers: Headers = None) -> int:
        """Queue ``(key, value)`` records that share ``headers``, as :meth:`send` would one by
        one; how many. One loop with no call layer per record: the audit service sends one
        link per event, and the layers cost more than the client's own ``produce``."""
        unacked = self._unacked
        produce = self._producer.produce
        topic = self.topic
        delivered = self._delivered
        rid = self._next_id
        first = rid
        for key, value in records:
            unacked[rid] = _Record(key, value, headers, None)
            if self._retry:  # an earlier record waits to be sent again: queue behind it
                self._retry.add(rid)
            else:
                try:
                    produce(
                        topic,
                        value,
                        key,
                        headers=headers,
                        on_delivery=functools.partial(delivered, rid),
                    )
                except (BufferError, KafkaException) as exc:
                    self._refused(rid, exc)
            rid += 1
        self._next_id = rid
        return rid - first

    def _produce(self, rid: int) -> None:
        record = self._unacked[rid]
        try:
            self._producer.produce(
                self.topic,
                key=record.key,
                value=record.value,
                headers=record.headers,
                on_delivery=functools.partial(self._delivered, rid),
            )
        except (BufferError, KafkaException) as exc:
            self._refused(rid, exc)

    def _refused(self, rid: int, exc: BufferError | KafkaException) -> None:
        """``produce`` raised for record ``rid``: retry it later, or drop it as too large."""
        if isinstance(exc, BufferError):
            self._retry.add(rid)  # the local queue is full: the broker is slow or away
            self._errors.append("local producer queue full")
            return
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and too_large(err):
            self._drop_too_large(rid, err.str())
        else:
            self._retry.add(rid)
            self._errors.append(str(exc))

    def _delivered(self, rid: int, err: KafkaError | None, msg: Any = None) -> None:
        if err is None:
            self._unacked.pop(rid, None)
        elif too_large(err) and rid in self._suspect:
            self._drop_too_large(rid, err.str())  # refused alone: it is the large one
        elif too_large(err):
            self._suspect.add(rid)  # maybe only beside the large one in a refused batch
            self._retry.add(rid)
        else:
            self._retry.add(rid)
            self._errors.append(err.str())
            self._fatal = self._fatal or err.fatal()

    def _drop_too_large(self, rid: int, detail: str) -> None:
        record = self._unacked.pop(rid)
        self._retry.discard(rid)
        self._suspect.discard(rid)
        self.too_large += 1
        size = len(record.value or b"")
        log.error("%s: a %d-byte record is too large for the topic: %s", self.topic, size, detail)
        if self._on_too_large is not None:
            self._on_too_large(record.tag, f"{size}-byte record to {self.topic}: {detail}")

    def poll(self) -> None:
        """Serve delivery reports that arrived (never waits)."""
        self._producer.poll(0)

    # --- confirming ------------------------------------------------------------------------
    def confirm(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every acknowledgement; :class:`StoreUnavailable` if not.

        Records whose delivery failed are produced again first, in order, once nothing else
        is in flight (so none of them can be overtaken by a newer record).
        """
        in_flight = self._producer.flush(timeout_s)
        if not in_flight and self._retry:  # failed before this call or while it waited
            self._settle()
            self._resend(timeout_s)
            in_flight = self._producer.flush(timeout_s)
        if in_flight or self._retry:
            raise self._unavailable(in_flight)
        self._unacked.clear()  # drained, and no record failed: all are acknowledged
        self._suspect.clear()
        self._errors.clear()

    def _settle(self) -> None:
        """Nothing is in flight: every record but those that failed is acknowledged."""
        retry = self._retry
        self._unacked = {rid: r for rid, r in self._unacked.items() if rid in retry}
        self._suspect &= retry

    def _resend(self, timeout_s: float) -> None:
        if self._fatal:
            log.warning("%s: the producer failed fatally; starting a new one", self.topic)
            self._producer = self._factory(self._config)
            self._fatal = False
        again = sorted(self._retry)
        self._retry.clear()
        log.info("%s: producing %d undelivered record(s) again", self.topic, len(again))
        for position, rid in enumerate(again):
            if rid not in self._unacked:
                continue
            alone = rid in self._suspect
            if alone and self._producer.flush(timeout_s):  # the suspect gets a batch alone
                self._retry.update(again[position:])
                return
            self._produce(rid)
            if alone and not self._retry:
                if self._producer.flush(timeout_s):  # still in flight: the rest waits
                    self._retry.update(again[position + 1 :])
                    return
                if rid not in self._retry:  # no failure report: delivered (or dropped)
                    self._unacked.pop(rid, None)
                    self._suspect.discard(rid)
            if self._retry:  # failed at once again: keep the rest behind it, in order
                self._retry.update(again[position + 1 :])
                return

    def _unavailable(self, in_flight: int) -> StoreUnavailable:
        detail = (
            f"{len(self._unacked)} record(s) unacknowledged: {in_flight} in flight, "
            f"{len(self._retry)} failed and to be sent again"
        )
        if self._errors:
            detail += f"; last error: {self._errors[-1]}"
            del self._errors[:-1]
        return StoreUnavailable(f"topic {self.topic}", detail)

    @property
    def unacknowledged(self) -> int:
        """Records sent and not yet confirmed by :meth:`confirm`."""
        return len(self._unacked)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Give in-flight records a last chance; what is left is logged (the next start resends)."""
        left = self._producer.flush(timeout_s)
        if not left:
            self._settle()
        if left or self._unacked:
            log.warning(
                "%s: closing with %d record(s) unacknowledged; the next start writes them again",
                self.topic,
                len(self._unacked),
            )


__all__ = [
    "CLOSE_TIMEOUT_S",
    "CONFIRM_TIMEOUT_S",
    "OutputTopic",
    "output_message_max_bytes",
    "output_producer_config",
]
