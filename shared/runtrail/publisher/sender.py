"""The publisher's Kafka producer: one topic, one shared delivery callback, replaceable.

Why apart from the drain: the drain decides what is sent and when; this is only how a record
reaches librdkafka, byte-identical on every attempt (key, value, headers and its accept time
as the Kafka timestamp, which the recovery scan searches by), and what the client says of
itself: credentials the broker refuses (told once, then the events wait in the spool), a fatal
error (raised by ``poll`` or ``produce``, never passed to ``error_cb``: :mod:`runtrail.kafka.
fatal`), and whether it has lost every broker for good (:mod:`runtrail.kafka.orphan_watch`,
from its statistics). The drain answers the last two with a new producer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer

from runtrail.config import Settings
from runtrail.kafka.auth import describe, is_auth_failure, naming_options
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.fatal import fatal_error, poll_through
from runtrail.kafka.orphan_watch import STATISTICS_INTERVAL_MS, OrphanWatch
from runtrail.kafka.producer_config import SIZE_ERRORS, producer_config
from runtrail.publisher.spool_record import SpoolRecord

log = logging.getLogger(__name__)

#: Broker verdicts that no resend can change: spooling such an event would block the spool.
PERMANENT_ERRORS: frozenset[int] = SIZE_ERRORS | {
    KafkaError.INVALID_RECORD,
    KafkaError._INVALID_ARG,
}


class ProducerLike(Protocol):
    """The part of ``confluent_kafka.Producer`` the publisher uses (tests pass fakes)."""

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...
    def purge(self, in_queue: bool = ..., in_flight: bool = ..., blocking: bool = ...) -> None: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


ProducerFactory = Callable[[dict[str, Any]], ProducerLike]
#: Called with each delivery report, from whichever thread polled.
OnReport = Callable[[KafkaError | None, Any], None]


class Sender:
    """One producer for ``topic`` whose every report goes to ``on_report``."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        on_report: OnReport,
        spool_folder: Path,
        producer_overrides: Mapping[str, Any] | None,
        producer_factory: ProducerFactory | None,
    ) -> None:
        self._topic = topic
        self._on_report = on_report
        self._spool_folder = spool_folder
        #: the client hit a fatal error: :meth:`recreate` before the next produce
        self.fatal = False
        #: why the broker refuses this publisher's credentials (None: it does not, or not yet)
        self.refused: str | None = None
        #: whether the client has lost every broker for good (fed by its statistics)
        self.orphan = OrphanWatch()
        self._config = producer_config(
            settings,
            error_cb=self._on_kafka_error,
            logger=client_logger("runtrail.publisher.librdkafka"),
            **{
                "statistics.interval.ms": STATISTICS_INTERVAL_MS,
                "stats_cb": self._on_stats,
                **dict(producer_overrides or {}),
            },
        )
        self._factory: ProducerFactory = producer_factory or Producer
        self._naming = naming_options(self._config)
        self._producer = self._factory(self._config)

    def produce(self, record: SpoolRecord) -> None:
        """Hand ``record`` to librdkafka (raises ``BufferError`` when its queue is full, and
        ``KafkaException`` when it refuses the record or is finished: then :attr:`fatal`)."""
        try:
            self._producer.produce(
                self._topic,
                value=record.value,
                key=record.key,
                headers=list(record.headers),
                timestamp=record.timestamp_ms or 0,
                on_delivery=self._on_report,
            )
        except KafkaException as exc:
            err = fatal_error(exc)
            if err is not None:
                self._ended(err)
            raise

    def poll(self, timeout: float) -> None:
        """Serve delivery reports for up to ``timeout`` seconds; a fatal error the client
        raises meanwhile sets :attr:`fatal` (the caller must not fail for it)."""
        poll_through(self._producer, timeout, self._ended)

    def _ended(self, err: KafkaError) -> None:
        """The client's fatal error: noted, the drain replaces the client."""
        if not self.fatal:
            self.fatal = True
            log.error("fatal Kafka client error, a new producer replaces it: %s", err.str())

    def purge(self) -> None:
        """Take back everything queued or in flight (each gets a purge report)."""
        self._producer.purge(in_queue=True, in_flight=True, blocking=True)

    def reachable(self) -> bool:
        """A cheap metadata request, so a dead broker costs no message timeouts."""
        try:
            self._producer.list_topics(self._topic, timeout=2.0)
        except KafkaException:
            return False
        return True

    def recreate(self) -> None:
        """A new producer, bootstrapping afresh: after a fatal error (e.g. idempotence state
        lost), or when the old one has lost every broker. Call with nothing queued or in
        flight."""
        self._producer = self._factory(self._config)
        self.fatal = False
        self.orphan.restart()

    def _on_stats(self, data: str) -> None:
        self.orphan.statistics(data, time.monotonic())

    def _on_kafka_error(self, err: KafkaError) -> None:
        if is_auth_failure(err):
            # told once: the agent goes on, its events wait in the spool until the credentials
            # are fixed and the agent restarted (a retry with the same ones cannot succeed)
            if self.refused is None:
                self.refused = describe(err, self._naming)
                log.error("%s; events are kept in the spool %s", self.refused, self._spool_folder)
            return
        log.debug("kafka client error: %s", err.str())
