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

A producer that has lost every broker for good (:mod:`runtrail.kafka.orphan_watch`, read from
its statistics) or that a fatal error ended (:mod:`runtrail.kafka.fatal`) is replaced at the
next :meth:`OutputTopic.confirm`: its records are taken back and produced again, in order, by
a new one that bootstraps afresh. As after a restart, a record
the broker wrote just before its acknowledgement was lost can then be written twice.

Records are kept, sent again and judged "too large" by the producer core all runtrail
producers share (:mod:`runtrail.kafka.unacked`): a record refused inside a batch is produced
again alone, and only a second size error, for it alone, drops it. A record cleared this way
can land after records sent after it (they were in flight while the batch failed); losing it
would be worse.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from runtrail.config import Settings
from runtrail.kafka.fatal import flush_through, is_fatal, poll_through
from runtrail.kafka.orphan_watch import STATISTICS_INTERVAL_MS, OrphanWatch
from runtrail.kafka.producer_config import producer_config, too_large
from runtrail.kafka.topics import max_message_bytes
from runtrail.kafka.unacked import Unacked, resend
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
    #: the partition it must go to (None: by its key)
    partition: int | None = None


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
        #: whether the producer has lost every broker for good (fed by its statistics)
        self._orphan = OrphanWatch()
        self._config = output_producer_config(
            settings,
            **{
                "client.id": client_id,
                "statistics.interval.ms": STATISTICS_INTERVAL_MS,
                "stats_cb": self._on_stats,
                **(overrides or {}),
            },
        )
        self._factory = producer_factory
        self._producer = producer_factory(self._config)
        self._on_too_large = on_too_large
        #: every record not yet confirmed, in the order it was sent (librdkafka reports
        #: failures only: what is here when the queue has drained with no report is delivered)
        self._unacked: Unacked[_Record] = Unacked()
        self._errors: list[str] = []
        #: why the producer must be replaced before the next resend (None: it need not)
        self._renew: str | None = None
        #: records dropped as too large since the last confirm
        self.too_large = 0

    # --- sending ---------------------------------------------------------------------------
    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = None,
        tag: Any = None,
        *,
        partition: int | None = None,
    ) -> None:
        """Queue a record (to ``partition``, else by its key); never raises for an outage
        (``confirm`` reports it)."""
        rid, now = self._unacked.add(_Record(key, value, headers, tag, partition))
        if now:
            self._produce(rid)

    def send_many(self, records: Iterable[tuple[bytes, bytes]], headers: Headers = None) -> int:
        """Queue ``(key, value)`` records that share ``headers``, as :meth:`send` would one by
        one; how many. One loop with no call layer per record but the bookkeeping: the audit
        service sends one link per event, and layers cost more than the client's ``produce``."""
        add = self._unacked.add
        produce = self._producer.produce
        topic = self.topic
        delivered = self._delivered
        count = 0
        for key, value in records:
            rid, now = add(_Record(key, value, headers, None))
            count += 1
            if now:
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
        return count

    def _produce(self, rid: int) -> None:
        record = self._unacked.records[rid]
        where = {} if record.partition is None else {"partition": record.partition}
        try:
            self._producer.produce(
                self.topic,
                key=record.key,
                value=record.value,
                headers=record.headers,
                on_delivery=functools.partial(self._delivered, rid),
                **where,
            )
        except (BufferError, KafkaException) as exc:
            self._refused(rid, exc)

    def _refused(self, rid: int, exc: BufferError | KafkaException) -> None:
        """``produce`` raised for record ``rid``: retry it later, or drop it as too large."""
        if isinstance(exc, BufferError):
            self._unacked.fail(rid)  # the local queue is full: the broker is slow or away
            self._errors.append("local producer queue full")
            return
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and too_large(err):
            self._drop_too_large(rid, err.str())
        else:
            self._unacked.fail(rid)
            self._errors.append(str(exc))
            if isinstance(err, KafkaError) and is_fatal(err):
                self._ended(err)

    def _delivered(self, rid: int, err: KafkaError | None, msg: Any = None) -> None:
        if err is None:
            self._unacked.acked(rid)
        elif too_large(err):
            if self._unacked.refused_too_large(rid):
                self._drop_too_large(rid, err.str())  # refused alone: it is the large one
        else:
            self._unacked.fail(rid)
            self._errors.append(err.str())
            if is_fatal(err):
                self._ended(err)

    def _drop_too_large(self, rid: int, detail: str) -> None:
        record = self._unacked.drop(rid)
        if record is None:
            return
        self.too_large += 1
        size = len(record.value or b"")
        log.error("%s: a %d-byte record is too large for the topic: %s", self.topic, size, detail)
        if self._on_too_large is not None:
            self._on_too_large(record.tag, f"{size}-byte record to {self.topic}: {detail}")

    def poll(self) -> None:
        """Serve delivery reports that arrived (never waits)."""
        poll_through(self._producer, 0, self._ended)

    def _flush(self, timeout_s: float) -> int:
        """``flush``: how many records are still in flight (a fatal error is noted)."""
        return flush_through(self._producer, timeout_s, self._ended)

    def _ended(self, err: KafkaError) -> None:
        """A fatal error ended the producer: every record it held is failed, and it is
        replaced before they are sent again."""
        if self._renew is None:
            log.error("%s: fatal Kafka client error: %s", self.topic, err.str())
            self._errors.append(err.str())
            self._renew = f"the producer failed fatally: {err.str()}"
        self._unacked.fail_all()

    # --- confirming ------------------------------------------------------------------------
    def confirm(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every acknowledgement; :class:`StoreUnavailable` if not.

        Records whose delivery failed are produced again first, in order, once nothing else
        is in flight (so none of them can be overtaken by a newer record).
        """
        in_flight = self._flush(timeout_s)
        if in_flight and self._orphan.orphaned(time.monotonic()):
            in_flight = self._take_back()
        if not in_flight and self._unacked.failed:  # failed before this call or meanwhile
            self._unacked.drained()
            self._resend(timeout_s)
            in_flight = self._flush(timeout_s)
        if in_flight or self._unacked.failed:
            raise self._unavailable(in_flight)
        self._unacked.clear()  # drained, and no record failed: all are acknowledged
        self._errors.clear()

    def _on_stats(self, data: str) -> None:
        """librdkafka's statistics, every ``STATISTICS_INTERVAL_MS`` (served by polls)."""
        self._orphan.statistics(data, time.monotonic())

    def _take_back(self) -> int:
        """Take every record back from a producer that lost every broker for good (each
        purged one fails, to be produced again by its successor); what is still in flight."""
        self._renew = self._orphan.describe(time.monotonic())
        self._orphan.restart()
        self._producer.purge(in_queue=True, in_flight=True, blocking=True)
        return self._flush(1.0)  # serves the purge's failure reports

    def _resend(self, timeout_s: float) -> None:
        if self._renew is not None:
            log.warning("%s: %s; starting a new producer", self.topic, self._renew)
            self._producer = self._factory(self._config)
            self._renew = None
        log.info("%s: producing %d undelivered record(s) again", self.topic, self._unacked.failed)
        resend(self._unacked, self._produce, self._flush, timeout_s)

    def _unavailable(self, in_flight: int) -> StoreUnavailable:
        detail = (
            f"{len(self._unacked)} record(s) unacknowledged: {in_flight} in flight, "
            f"{self._unacked.failed} failed and to be sent again"
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
        left = self._flush(timeout_s)
        if not left:
            self._unacked.drained()
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
