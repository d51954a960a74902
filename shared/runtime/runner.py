"""The consume loop: batches in, outputs made durable, offsets committed — at least once.

Guarantees:
- offsets are committed only after the service's :meth:`~Service.flush` and the dead-letter
  flush returned, and never past an offset the service still holds;
- on revoke (eager ``range`` assignment by default; see librdkafka #4059 for why not
  cooperative-sticky) the runtime flushes and commits the revoked partitions before giving
  them up, then the service drops their state; on *lost* partitions nothing is committed;
- on SIGTERM/SIGINT it stops fetching, flushes, commits and exits 0 within a bounded time
  (a watchdog forces exit 2 if the bound is exceeded).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, cast

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.runtime.deadletter import DeadLetterProducer
from runtrail.runtime.decoding import BatchDecoder
from runtrail.runtime.delivery import Delivered, Partition
from runtrail.runtime.http import EndpointAuth, HealthState, HttpEndpoint
from runtrail.runtime.metrics import RuntimeMetrics
from runtrail.runtime.sequencing import SequenceChecker
from runtrail.runtime.service import Service, ServiceContext

log = logging.getLogger(__name__)

ServiceFactory = Callable[[ServiceContext], Service]


class ServiceRunner:
    """Runs one service instance in one consumer group member."""

    def __init__(
        self,
        factory: ServiceFactory,
        settings: Settings,
        *,
        service_name: str,
        options: dict[str, str] | None = None,
        group: str | None = None,
        metrics_port: int | None = None,
        default_port: int = 9400,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.name = service_name
        self.group = group or settings.group or f"runtrail.{service_name}"
        self.registry = registry or CollectorRegistry()
        self.metrics = RuntimeMetrics(service_name, self.registry)
        self.health = HealthState()
        self._stop = threading.Event()
        self._failed = False
        self._positions: dict[Partition, int] = {}
        self._committed: dict[Partition, tuple[int, str | None]] = {}
        self._assigned: set[Partition] = set()
        self._last_commit = time.monotonic()
        self._sequences = SequenceChecker()
        self._dlq = DeadLetterProducer(settings.kafka_config(), settings.dlq_topic, service_name)
        self.context = ServiceContext(
            settings=settings,
            options=options or {},
            registry=self.registry,
            dead_letter=self._dead_letter_delivered,
        )
        self.service = factory(self.context)
        self._codec = EventCodec(settings.extra_schema_dirs)
        self._decoder = BatchDecoder(self._codec, self._sequences, self._dead_letter_message)
        port = metrics_port if metrics_port is not None else settings.metrics_port
        self._http = HttpEndpoint(
            settings.metrics_host,
            default_port if port is None else port,
            self.registry,
            self.health,
            EndpointAuth.from_settings(settings),
        )
        self._consumer = Consumer(self._consumer_config())

    # --- configuration ---------------------------------------------------------------------
    def _consumer_config(self) -> dict[str, Any]:
        overrides: dict[str, Any] = {
            "group.id": self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": self.settings.auto_offset_reset,
            "partition.assignment.strategy": self.settings.assignment_strategy,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 2000,
            "statistics.interval.ms": 5000,
            "stats_cb": self.metrics.on_stats,
            "client.id": f"runtrail-{self.name}-{os.getpid()}",
        }
        config = self.settings.kafka_config(**overrides)
        # Passthrough options win over our defaults, except the ones correctness depends on.
        config.update({k: v for k, v in self.settings.kafka_options.items() if k not in _PINNED})
        return dict(config)

    @property
    def metrics_port(self) -> int:
        return int(self._http.port)

    # --- dead letters ----------------------------------------------------------------------
    def _dead_letter_message(self, msg: Message, reason: str, detail: str) -> None:
        self._dlq.send(
            key=msg.key(),
            value=msg.value(),
            headers=msg.headers(),  # type: ignore[arg-type]
            source_topic=cast(str, msg.topic()),
            partition=cast(int, msg.partition()),
            offset=cast(int, msg.offset()),
            timestamp_ms=msg.timestamp()[1],
            reason=reason,
            detail=detail,
        )

    def _dead_letter_delivered(self, delivered: Delivered, reason: str, detail: str) -> None:
        """A service could not interpret an event: it goes to the DLQ with its original bytes."""
        value = self._codec.encode_json_form(delivered.written)
        self._dlq.send(
            key=delivered.key,
            value=value,
            headers=None,
            source_topic=delivered.topic,
            partition=delivered.partition,
            offset=delivered.offset,
            timestamp_ms=delivered.timestamp_ms,
            reason=reason,
            detail=detail,
        )
        self.metrics.dead_lettered(reason).inc()

    # --- rebalance callbacks (called from inside consume()) --------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.metrics.rebalances.labels(self.name, "assign").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        if self.service.wants_committed:
            committed = consumer.committed(partitions, timeout=30)
            self.service.on_committed(
                {(c.topic, c.partition): (c.offset, c.metadata) for c in committed}
            )
        stored = self.service.on_assigned(parts)
        if stored:
            for p in partitions:
                offset = stored.get((p.topic, p.partition))
                if offset is not None:
                    p.offset = offset
        if self._cooperative(consumer):
            consumer.incremental_assign(partitions)
            self._assigned.update(parts)
        else:
            consumer.assign(partitions)
            self._assigned = set(parts)
        self.metrics.assigned.set(len(self._assigned))
        self.health.ready = True
        log.info("%s assigned %s", self.name, _fmt(parts))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.metrics.rebalances.labels(self.name, "revoke").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        try:
            if not self._failed:
                self._commit(force=True, only=set(parts))
        finally:
            self._forget(parts)
            self._unassign(consumer, partitions)
        log.info("%s revoked %s (committed)", self.name, _fmt(parts))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions were taken away without a clean revoke: another member may own them now,
        so committing would be wrong. Output already written stays (it is idempotent)."""
        self.metrics.rebalances.labels(self.name, "lost").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        self._forget(parts)
        self._unassign(consumer, partitions)
        log.warning("%s lost %s (not committed)", self.name, _fmt(parts))

    def _cooperative(self, consumer: Consumer) -> bool:
        return "cooperative" in self.settings.assignment_strategy

    def _unassign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Tracked here rather than asked of librdkafka: during close() it may refuse to answer.
        if self._cooperative(consumer):
            consumer.incremental_unassign(partitions)
            self._assigned.difference_update((p.topic, p.partition) for p in partitions)
        else:
            consumer.unassign()
            self._assigned.clear()
        self.metrics.assigned.set(len(self._assigned))

    def _forget(self, parts: list[Partition]) -> None:
        for tp in parts:
            self._positions.pop(tp, None)
            self._committed.pop(tp, None)
            self.metrics.forget_partition(*tp)
        self._sequences.drop([p for _, p in parts])
        self.service.on_revoked(parts)

    # --- commits ---------------------------------------------------------------------------
    def _commit(self, *, force: bool = False, only: set[Partition] | None = None) -> None:
        now = time.monotonic()
        if not force and (now - self._last_commit) * 1000 < self.settings.commit_interval_ms:
            return
        self._last_commit = now
        with self.metrics.commit_seconds.time():
            self.service.flush()
            self._dlq.flush()
            held = self.service.held_offsets()
            metadata = self.service.commit_metadata() if held else {}
            offsets = []
            for tp, position in self._positions.items():
                if only is not None and tp not in only:
                    continue
                hold = held.get(tp)
                # <=: a hold at the position itself still carries metadata worth keeping
                if hold is not None and hold <= position:
                    point = (hold, metadata.get(tp))
                else:
                    point = (position, None)
                if self._committed.get(tp) != point:
                    offsets.append(_topic_partition(tp, *point))
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
                for o in offsets:
                    self._committed[(o.topic, o.partition)] = (o.offset, o.metadata or None)
                self.metrics.commits.inc()

    # --- the loop --------------------------------------------------------------------------
    def _process(self, messages: list[Message]) -> None:
        with self.metrics.batch_seconds.time():
            result = self._decoder.decode_batch(messages)
            if result.delivered:
                try:
                    self.service.process(result.delivered)
                except Exception:
                    self.metrics.handler_errors.inc()
                    raise
            self._positions.update(result.positions)
            self.service.on_positions(result.positions)
        self.metrics.consumed.inc(result.consumed)
        self.metrics.processed.inc(len(result.delivered))
        for reason, count in result.dead.items():
            self.metrics.dead_lettered(reason).inc(count)
        for kind, count in result.anomalies.items():
            self.metrics.sequence_anomaly(kind).inc(count)
            log.warning("%s: %d per-run sequence %s(s) in this batch", self.name, count, kind)

    def request_stop(self) -> None:
        self._stop.set()
        self.health.stopping = True

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            log.info("%s: signal %d, stopping", self.name, signum)
            self.request_stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self) -> int:
        """Consume until stopped; returns the process exit status."""
        self._http.start()
        self._consumer.subscribe(
            [self.settings.events_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self.metrics.up.set(1)
        log.info(
            "%s (pid %d) consuming %s as group %s; metrics on %s:%d",
            self.name,
            os.getpid(),
            self.settings.events_topic,
            self.group,
            self.settings.metrics_host,
            self.metrics_port,
        )
        batch_size = self.settings.batch_size
        timeout = self.settings.batch_timeout_ms / 1000
        status = 0
        try:
            while not self._stop.is_set():
                messages = self._consumer.consume(num_messages=batch_size, timeout=timeout)
                if messages:
                    self._process(messages)
                self.service.tick(int(time.time() * 1000))
                self._commit()
                self.health.beat()
        except KafkaException as exc:
            log.error("%s: Kafka error, stopping without commit: %s", self.name, exc)
            status = 1
        except Exception:
            log.exception("%s: handler failed, stopping without commit", self.name)
            status = 1
        self.metrics.up.set(0)
        # After a failure, the revoke inside consumer.close() must not commit either.
        self._failed = status != 0
        return self._shutdown(status)

    def _shutdown(self, status: int) -> int:
        watchdog = threading.Timer(self.settings.shutdown_timeout_s, _force_exit)
        watchdog.daemon = True
        watchdog.start()
        try:
            if status == 0:
                self._commit(force=True)
            self._consumer.close()  # its revoke callback commits again: a no-op by now
            self.service.close()
        except Exception:
            log.exception("%s: error during shutdown", self.name)
            status = status or 1
        finally:
            watchdog.cancel()
            self._http.stop()
        log.info("%s stopped (status %d)", self.name, status)
        return status


_PINNED = {"enable.auto.commit", "enable.auto.offset.store", "group.id"}


def _topic_partition(tp: Partition, offset: int, metadata: str | None) -> TopicPartition:
    if metadata:
        return TopicPartition(tp[0], tp[1], offset, metadata)
    return TopicPartition(tp[0], tp[1], offset)


def _force_exit() -> None:
    log.error("shutdown exceeded its time bound; exiting")
    os._exit(2)


def _fmt(parts: list[Partition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(parts)) or "nothing"


__all__ = ["OFFSET_INVALID", "ServiceRunner"]
