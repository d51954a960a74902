"""The consume loop: batches in, outputs made durable, offsets committed — at least once.

Guarantees:
- offsets are committed only after the service's :meth:`~Service.flush` and the dead-letter
  flush returned, and never past an offset the service still holds: what to commit is the
  :class:`~runtrail.runtime.checkpoint.Checkpoint`'s answer (the runner only sends it);
- on revoke (eager ``range`` assignment by default, incremental ``cooperative-sticky`` if
  set) the runtime flushes and sends the revoked partitions' commit before giving them up,
  then the service drops their state; on *lost* partitions nothing is committed;
- every commit is bounded (:mod:`.commits`): asynchronous, one in flight, its result awaited
  at most ``commit_timeout_s``; no result in time is retryable like any broker failure;
- on SIGTERM/SIGINT it stops fetching, flushes, commits and exits 0 within a bounded time,
  also with a commit in flight and the broker gone (past the bound a watchdog forces the exit:
  status 2, or the fatal error's status when one stopped it);
- a retryable failure (broker or coordinator unreachable, a dead letter not yet durable, a
  service's :class:`~runtrail.runtime.unavailable.StoreUnavailable`; see :mod:`.retry`) never
  stops the process: consumption pauses (``consume()`` keeps being called, so group membership
  and ``max.poll.interval.ms`` are kept), ``/readyz`` answers 503 naming what failed, and the
  flush and commit are retried with bounded exponential backoff; nothing is committed until
  they succeed. Fatal errors (authentication, authorization, a dead-letter topic that does not
  exist) stop the process with status 1 and the error;
- a consumer group without its coordinator past ``group_stuck_s`` (a client that did not
  rejoin after an outage) is named by ``/readyz`` and, holding no partitions, gets a new Kafka
  client in the same process (:mod:`.group_watch`);
- one event can never stop a service: a batch whose :meth:`~Service.process` raises is run
  again one event at a time, and each event that still raises is dead-lettered
  (``handler-error``, or ``too-deep`` for a RecursionError) while the others are processed;
- but a handler that fails for every event does not dead-letter the stream: past the
  dead-letter limit (:mod:`.dlq_limit`: consecutive ``handler-error`` dead letters, or their
  share in a window, per partition) the partition is paused for the rest of the process's life,
  ``/readyz`` answers 503, ``runtrail_dlq_limit_tripped`` is 1 and one log line names the
  error; nothing is committed from the first handler error of the run that tripped it, so a
  restart with a fixed handler resumes there.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.events.limits import EventLimits, TooDeep
from runtrail.kafka.auth import KafkaAuthError, describe, is_auth_failure, naming_options
from runtrail.kafka.consumer_config import consumer_config
from runtrail.kafka.durability import CHECK_TIMEOUT_S, start_durability_check
from runtrail.kafka.producer_config import dead_letter_config
from runtrail.kafka.retry import Backoff
from runtrail.kafka.topics import design_topic_names, max_message_bytes
from runtrail.runtime import stop_signals
from runtrail.runtime.checkpoint import Checkpoint, Committed
from runtrail.runtime.commit_procedure import CommitProcedure
from runtrail.runtime.deadletter import DeadLetterError, DeadLetterProducer, Headers
from runtrail.runtime.decoding import BatchDecoder, BatchResult, raw_batch
from runtrail.runtime.delivery import Delivered, Partition, RawRecord
from runtrail.runtime.dlq_limit import DlqLimit, DlqLimiter, Trip
from runtrail.runtime.gc_tuning import FlushPacedGc, service_gc
from runtrail.runtime.group_watch import GroupWatch
from runtrail.runtime.http import EndpointAuth, HealthState, HttpEndpoint
from runtrail.runtime.metrics import HANDLER_ERROR, RuntimeMetrics
from runtrail.runtime.rebalance_window import RebalanceWindow, partition_of
from runtrail.runtime.retry import Problem, classify
from runtrail.runtime.sequencing import new_sequence_checker
from runtrail.runtime.service import PROCESS_CHUNK, RawService, Service, ServiceContext
from runtrail.runtime.unavailable import StoreUnavailable

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
        #: collections paced by flushes while run() consumes (see runtime.gc_tuning)
        self._gc: FlushPacedGc | None = None
        self._assigned: set[Partition] = set()
        #: what the rebalance callbacks of the current consume() call did (see _consume)
        self._window = RebalanceWindow()
        self._sequences = new_sequence_checker()
        self._limits = EventLimits.from_settings(settings)
        #: handler errors per partition against the dead-letter limit, and the partitions it
        #: stopped (paused until the process ends, even across a rebalance)
        self._dlq_limit = DlqLimiter(DlqLimit.from_settings(settings))
        self._stopped: dict[Partition, Trip] = {}
        self._dlq = DeadLetterProducer(
            dead_letter_config(settings, self._limits.max_event_bytes),
            settings.dlq_topic,
            service_name,
            max_event_bytes=self._limits.max_event_bytes,
        )
        # waiting out a retryable failure: what failed, when to try again, how long to wait
        self._problem: Problem | None = None
        self._problem_since = 0.0
        self._retry_at = 0.0
        self._backoff = Backoff()
        self._paused = False
        self._fatal_error: KafkaException | None = None
        self._brokers_down = False  # the client said all brokers are down, no broker up since
        #: how long the group has been without its coordinator (see runtime.group_watch)
        self._group = GroupWatch(settings.group_stuck_s)
        self._replace_wanted = False
        #: which Kafka client is current: callbacks of a replaced one are ignored
        self._client = 0
        #: replaced clients, closing on their own threads (kept referenced: see _retire)
        self._retired: list[threading.Thread] = []
        #: positions, holds, start points and commits: what may be committed, per partition
        self.checkpoint = Checkpoint(self._group_commits)
        self.context = ServiceContext(
            settings=settings,
            options=options or {},
            registry=self.registry,
            dead_letter=self._dead_letter_delivered,
            checkpoint=self.checkpoint,
        )
        self.service = factory(self.context)
        #: a service of raw records (not events): the same loop, without decoding them
        self._raw = self.service if isinstance(self.service, RawService) else None
        self._topic = type(self.service).source_topic(settings)
        self._batch_size = settings.batch_size or self.service.batch_size
        #: the last step took messages without waiting (see _take)
        self._reading_backlog = False
        self._codec = EventCodec(settings.extra_schema_dirs)
        self._decoder = BatchDecoder(
            self._codec,
            self._sequences,
            self._dead_letter_message,
            self._limits,
            with_headers=self._dead_letter_message,
            with_written=self.service.reads_written,
        )
        port = metrics_port if metrics_port is not None else settings.metrics_port
        self._http = HttpEndpoint(
            settings.metrics_host,
            default_port if port is None else port,
            self.registry,
            self.health,
            EndpointAuth.from_settings(settings),
        )
        #: what the consumer connects with (security.protocol, mechanism…), for error messages
        config = self._consumer_config()
        self._connect_options = naming_options(config)
        self._consumer = self._new_consumer(config)
        #: flush order, requests in flight, generations, restart points: every commit
        self.commits = CommitProcedure(
            service_name,
            settings,
            self.checkpoint,
            self.metrics,
            self.health,
            flush_service=lambda: self.service.flush(),
            after_flush=self._after_flush,
            flush_dead_letters=lambda timeout: self._dlq.flush(timeout),
            serve=self._serve,
            waiting_out=lambda: self._problem is not None,
            stopping=self._stop.is_set,
        )

    # --- configuration ---------------------------------------------------------------------
    def _consumer_config(self) -> dict[str, Any]:
        fetch_bytes = max(_LIBRDKAFKA_FETCH_MAX, max_message_bytes(self._limits.max_event_bytes))
        overrides: dict[str, Any] = {
            "group.id": self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": self.settings.auto_offset_reset,
            "partition.assignment.strategy": self.settings.assignment_strategy,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 2000,
            "statistics.interval.ms": 5000,
            "client.id": f"runtrail-{self.name}-{os.getpid()}",
            # a legal event of max_event_bytes must be fetchable (librdkafka needs
            # receive.message.max.bytes >= fetch.max.bytes + 512)
            "fetch.max.bytes": fetch_bytes,
            "receive.message.max.bytes": max(_LIBRDKAFKA_RECEIVE_MAX, fetch_bytes + 1024 * 1024),
        }
        config = consumer_config(self.settings, **overrides)
        # Passthrough options win over our defaults, except the ones correctness depends on.
        config.update({k: v for k, v in self.settings.kafka_options.items() if k not in _PINNED})
        return dict(config)

    def _new_consumer(self, config: dict[str, Any]) -> Consumer:
        """A Kafka client whose callbacks reach the runner only while it is the current one
        (a replaced client still closing on its thread must not touch the runner's state)."""
        self._client += 1
        client = self._client

        def current() -> bool:
            return self._client == client

        def on_stats(stats_json: str) -> None:
            if current():
                self._on_stats(stats_json)

        def on_error(err: KafkaError) -> None:
            if current():
                self._on_kafka_error(err)

        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            if current():
                self._on_commit(err, partitions)

        return Consumer(
            {**config, "stats_cb": on_stats, "error_cb": on_error, "on_commit": on_commit}
        )

    def _subscribe(self) -> None:
        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if consumer is self._consumer:
                self._on_assign(consumer, partitions)

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if consumer is self._consumer:
                self._on_revoke(consumer, partitions)

        def on_lost(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if consumer is self._consumer:
                self._on_lost(consumer, partitions)

        # (a callback that does not assign or unassign leaves it to the client library)
        self._consumer.subscribe(
            [self._topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    @property
    def metrics_port(self) -> int:
        return int(self._http.port)

    # --- dead letters ----------------------------------------------------------------------
    def _dead_letter_message(
        self, msg: Message, reason: str, detail: str, extra: Headers | None = None
    ) -> None:
        self._dlq.send(
            key=msg.key(),
            value=msg.value(),
            headers=cast(Headers | None, msg.headers()),
            source_topic=cast(str, msg.topic()),
            partition=cast(int, msg.partition()),
            offset=cast(int, msg.offset()),
            timestamp_ms=msg.timestamp()[1],
            reason=reason,
            detail=detail,
            extra=extra,
        )

    def _dead_letter_delivered(
        self,
        delivered: Delivered | RawRecord,
        reason: str,
        detail: str,
        extra: Headers | None = None,
    ) -> None:
        """An event (or raw record) a service could not take: to the DLQ with its consumed
        bytes and headers."""
        msg = delivered.message
        if msg is not None:
            value, headers = msg.value(), cast(Headers | None, msg.headers())
        else:  # built by hand (tests, replays): there are no consumed bytes to keep
            assert isinstance(delivered, Delivered)  # a raw record is always a consumed one
            value, headers = (
                (
                    self._codec.encode(delivered.event)
                    if delivered.written is None
                    else self._codec.encode_json_form(delivered.written)
                ),
                None,
            )
        self._dlq.send(
            key=delivered.key,
            value=value,
            headers=headers,
            source_topic=delivered.topic,
            partition=delivered.partition,
            offset=delivered.offset,
            timestamp_ms=delivered.timestamp_ms,
            reason=reason,
            detail=detail,
            extra=extra,
        )
        self.metrics.dead_lettered(reason).inc()

    # --- Kafka client callbacks (called from inside consume()) -----------------------------
    def _on_kafka_error(self, err: KafkaError) -> None:
        if is_auth_failure(err):
            if self._fatal_error is None:
                self._fatal_error = KafkaAuthError(err, describe(err, self._connect_options))
            return
        if err.fatal() or err.code() in _FATAL_LINK_CODES:
            self._fatal_error = self._fatal_error or KafkaException(err)
            return
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._link_down(f"{err.name()}: {err.str()}")
        else:  # librdkafka logs these itself; they matter when all brokers are down
            log.debug("%s: Kafka client: %s", self.name, err)

    def _on_consume_errors(self, errors: list[KafkaError]) -> None:
        """What the client handed over instead of messages: a source topic that does not exist
        is named by readiness and the log (the service waits for it), not passed over."""
        for err in errors:
            # while partitions of it are held the topic exists: a broker just back may answer
            # "unknown" until it has loaded it, which must not hold readiness until a rebalance
            if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and not self._assigned:
                detail = (
                    f"topic {self._topic} does not exist on "
                    f"{self._connect_options.get('bootstrap.servers', '?')} (create it: "
                    "runtrail topics ensure; or check the topic setting)"
                )
                if _TOPIC not in self.health.unavailable:
                    log.warning("%s: %s; not ready until it does", self.name, detail)
                self.health.unavailable[_TOPIC] = detail
                self.metrics.unavailable(_TOPIC).set(1)
            elif err.code() != KafkaError._PARTITION_EOF:
                log.debug("%s: Kafka client: %s", self.name, err)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.commits.on_commit(err, partitions)

    def _on_stats(self, stats_json: str) -> None:
        """Every ``statistics.interval.ms``: the Kafka link is down when no broker connection
        is up. (librdkafka's ``_ALL_BROKERS_DOWN`` is the fast signal, but an idle consumer
        does not always get it.)"""
        stats = self.metrics.on_stats(stats_json)
        brokers = stats.get("brokers", {}).values()
        if not any(b.get("state") == "UP" for b in brokers):
            self._link_down("no broker connection is up (client statistics)")
        elif self._brokers_down and (self._problem is None or self._problem.what != _KAFKA):
            self._brokers_down = False
            log.info("%s: Kafka reachable again", self.name)
            self.health.unavailable.pop(_KAFKA, None)
            self.metrics.unavailable(_KAFKA).set(0)
        self._watch_group(stats.get("cgrp"), brokers)

    def _watch_group(self, cgrp: dict[str, Any] | None, brokers: Iterable[Any]) -> None:
        """A group without its coordinator past ``group_stuck_s`` (or a client that knows no
        broker) is named by readiness and, when no partitions are held, gets a new client at
        the next turn (runtime.group_watch)."""
        now = time.monotonic()
        self._group.observe(cgrp, now, brokers)
        if self._group.stuck(now):
            detail = self._group.describe(now)
            if _GROUP not in self.health.unavailable:
                log.warning("%s: consumer group %s: %s", self.name, self.group, detail)
            self.health.unavailable[_GROUP] = detail
            self.metrics.unavailable(_GROUP).set(1)
            self._replace_wanted = True
        elif self._group.since is None and _GROUP in self.health.unavailable:
            log.info("%s: consumer group %s has its coordinator again", self.name, self.group)
            del self.health.unavailable[_GROUP]
            self.metrics.unavailable(_GROUP).set(0)

    def _link_down(self, detail: str) -> None:
        self._brokers_down = True
        if _KAFKA not in self.health.unavailable:
            log.warning("%s: Kafka unreachable (%s); not ready until it is back", self.name, detail)
        self.health.unavailable[_KAFKA] = detail
        self.metrics.unavailable(_KAFKA).set(1)

    # --- rebalance callbacks (called from inside consume()) --------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.metrics.rebalances.labels(self.name, "assign").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        self._window.gave(parts)
        self.checkpoint.assigned(parts)
        self.service.on_assigned(parts)
        starts = self.checkpoint.starts(parts)
        for p in partitions:
            offset = starts.get((p.topic, p.partition))
            if offset is not None:
                p.offset = offset
        self.commits.skip_durable(consumer, partitions)
        if self._cooperative(consumer):
            consumer.incremental_assign(partitions)
            self._assigned.update(parts)
        else:
            consumer.assign(partitions)
            self._assigned = set(parts)
        # librdkafka keeps a partition's pause across unassign/assign: set it either way
        if self._paused:  # still waiting out a failure: new partitions wait too
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)
            stopped = [p for p in partitions if (p.topic, p.partition) in self._stopped]
            if stopped:  # the dead-letter limit stopped them in this process: they stay so
                consumer.pause(stopped)
        self.metrics.assigned.set(len(self._assigned))
        self.health.ready = True
        if parts and self.health.unavailable.pop(_TOPIC, None) is not None:
            self.metrics.unavailable(_TOPIC).set(0)
            log.info("%s: topic %s exists now", self.name, self._topic)
        log.info("%s assigned %s", self.name, _fmt(parts))

    def _group_commits(self, parts: Sequence[Partition]) -> dict[Partition, Committed]:
        """The group's committed offsets and metadata (what the checkpoint hands a service)."""
        committed = self._consumer.committed([TopicPartition(t, p) for t, p in parts], timeout=30)
        return {(c.topic, c.partition): (c.offset, c.metadata) for c in committed}

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.metrics.rebalances.labels(self.name, "revoke").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        self._window.took_away(parts)
        outcome = "not committed: stopping or waiting out a failure"
        try:
            if not self._failed and self._problem is None:
                # sent, not awaited (no consume() inside a callback): it is queued ahead of
                # the rejoin; if the next owner reads the commit first, it re-reads (at least once)
                self.commits.commit(self._consumer, force=True, only=set(parts))
                outcome = "commit sent"
        except Exception as exc:
            outcome = "not committed"
            # what was not committed is read again by the next owner (at least once)
            log.warning(
                "%s: could not commit revoked %s (%s); the next owner re-reads from the last "
                "commit",
                self.name,
                _fmt(parts),
                exc,
            )
        finally:
            self._release(consumer, partitions, parts)
        log.info("%s revoked %s (%s)", self.name, _fmt(parts), outcome)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions were taken away without a clean revoke: another member may own them now,
        so committing would be wrong. Output already written stays (it is idempotent)."""
        self.metrics.rebalances.labels(self.name, "lost").inc()
        parts = [(p.topic, p.partition) for p in partitions]
        self._window.took_away(parts)
        self.checkpoint.lost(parts)
        self._release(consumer, partitions, parts)
        log.warning("%s lost %s (not committed)", self.name, _fmt(parts))

    def _release(
        self, consumer: Consumer, partitions: list[TopicPartition], parts: list[Partition]
    ) -> None:
        """Drop the partitions' state, then give them up, even if the service's hook raised."""
        try:
            self._forget(parts)
        finally:
            self._unassign(consumer, partitions)

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
        self.commits.given_up()
        self.checkpoint.revoked(parts)
        self._dlq_limit.forget(parts)
        for tp in parts:
            self.metrics.forget_partition(*tp)
        self._sequences.drop([p for _, p in parts])
        self.service.on_revoked(parts)

    # --- commits (the sequence: :class:`CommitProcedure`) ------------------------------------
    def _after_flush(self) -> None:
        if self._gc is not None:
            self._gc.after_flush()

    def _serve(self, timeout: float, keep_messages: bool) -> None:
        """Serve the client's callbacks (the commit result) while waiting. Messages it hands
        out meanwhile are processed and held like any others; at the final commit they are
        dropped instead (never committed: the next start reads them again)."""
        messages = self._consume(self._batch_size, timeout)
        if messages and keep_messages:
            self._process(messages)

    # --- the loop --------------------------------------------------------------------------
    def _process(self, messages: list[Message]) -> None:
        """Decode and hand over a consumed batch, at most :data:`PROCESS_CHUNK` messages at a
        time, so that each chunk's events are processed while they are still in the CPU
        caches (sessions, whose batches are larger for its per-batch saves at
        :meth:`Service.tick`, ran at two thirds of the rate decoding and processing 2,000 at
        once)."""
        if self._stopped:  # fetched before the pause: left for the next start
            messages = [m for m in messages if (m.topic(), m.partition()) not in self._stopped]
            if not messages:
                return
        with self.metrics.batch_seconds.time():
            if len(messages) <= PROCESS_CHUNK:
                self._process_chunk(messages, messages, 0)
                return
            for start in range(0, len(messages), PROCESS_CHUNK):
                chunk = messages[start : start + PROCESS_CHUNK]
                if self._stopped:  # a chunk before tripped a partition's dead-letter limit
                    chunk = [m for m in chunk if (m.topic(), m.partition()) not in self._stopped]
                    if not chunk:
                        continue
                self._process_chunk(chunk, messages, start)

    def _process_chunk(self, chunk: list[Message], messages: list[Message], start: int) -> None:
        """One chunk of the batch ``messages``, which it starts at ``start``: if the service's
        store cannot take the chunk now, it and the rest of the batch are consumed again later
        (the chunks before it were processed)."""
        limiter = self._dlq_limit
        result = self._decode(chunk)
        if result.errors:
            self._on_consume_errors(result.errors)
        batch = self._batch_of(result)
        if batch:
            try:
                self._handle(batch)
            except StoreUnavailable:
                self._rewind(messages[start:])
                raise
            except Exception as exc:
                self.metrics.handler_errors.inc()
                log.warning(
                    "%s: a batch of %d failed (%s: %s); processing it one event at a time",
                    self.name,
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
                self._process_each(batch, messages[start:])
            else:
                if limiter.counting:
                    limiter.succeeded_batch(batch)
        if limiter.counting:  # no position passes an open run of handler errors
            limiter.cap(result.positions)
        self.checkpoint.reached(result.positions)
        self.metrics.consumed.inc(result.consumed)
        self.metrics.processed.inc(len(batch))
        for reason, count in result.dead.items():
            self.metrics.dead_lettered(reason).inc(count)
        for kind, count in result.anomalies.items():
            self.metrics.sequence_anomaly(kind).inc(count)
            log.warning("%s: %d per-run sequence %s(s) in this batch", self.name, count, kind)

    def _decode(self, messages: list[Message]) -> BatchResult:
        """The batch as the service takes it: validated events, or a raw service's records."""
        return (
            raw_batch(messages) if self._raw is not None else self._decoder.decode_batch(messages)
        )

    def _batch_of(self, result: BatchResult) -> list[Delivered] | list[RawRecord]:
        return result.records if self._raw is not None else result.delivered

    def _handle(self, batch: Sequence[Delivered] | Sequence[RawRecord]) -> None:
        """Hand a batch to the service: events to ``process``, records to ``process_raw``."""
        if self._raw is not None:
            self._raw.process_raw(cast(Sequence[RawRecord], batch))
        else:
            self.service.process(cast(Sequence[Delivered], batch))

    def _process_each(
        self, batch: list[Delivered] | list[RawRecord], messages: list[Message]
    ) -> None:
        """Find the poison event(s) of a failed batch: each one that raises is dead-lettered,
        up to the dead-letter limit of its partition (past it the partition stops)."""
        limiter = self._dlq_limit
        for delivered in batch:
            tp = (delivered.topic, delivered.partition)
            if tp in self._stopped:
                continue  # after the event that tripped the limit: left for the next start
            try:
                self._handle((delivered,))  # type: ignore[arg-type]
            except StoreUnavailable:
                self._rewind(messages)
                raise
            except RecursionError as exc:
                self._dead_letter_delivered(delivered, TooDeep.reason, f"RecursionError: {exc}")
            except Exception as exc:
                trip = limiter.failed(tp, delivered.offset)
                if trip is not None:
                    self._stop_partition(trip, exc)
                    continue
                self._dead_letter_delivered(
                    delivered, HANDLER_ERROR, f"{type(exc).__name__}: {exc}"
                )
            else:
                limiter.succeeded(tp, delivered.offset)

    def _stop_partition(self, trip: Trip, exc: Exception) -> None:
        """The dead-letter limit tripped: stop consuming the partition for the rest of this
        process, visibly; its positions stay at the run's first handler error (see
        :mod:`.dlq_limit`), so a restart with a handler that works resumes there."""
        topic, partition = tp = trip.partition
        self._stopped[tp] = trip
        self._consumer.pause([TopicPartition(topic, partition)])
        error = f"{type(exc).__name__}: {exc}"
        self.health.stopped[f"{topic}[{partition}]"] = f"dead-letter limit: {error}"
        self.metrics.dlq_limit_tripped(topic, partition).set(1)
        log.error(
            "%s: dead-letter limit: stopped consuming %s[%d] at offset %d: %s; last error: %s; "
            "nothing is committed from offset %d, where a restart with a fixed handler resumes "
            "(not ready until then)",
            self.name,
            topic,
            partition,
            trip.offset,
            trip.describe(),
            error[:500],
            trip.first_offset,
        )

    def _rewind(self, messages: list[Message]) -> None:
        """Consume a batch again later: seek each partition back to its first message.

        The sequence state of those partitions is dropped, or the repeat would be skipped as
        duplicates (the same as after a restart: rebuilt from what is read next)."""
        first: dict[Partition, int] = {}
        for msg in messages:
            if msg.error() is None:
                first.setdefault(partition_of(msg), msg.offset())  # type: ignore[arg-type]
        for (topic, partition), offset in first.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))
        self._sequences.drop([p for _, p in first])

    def _take(self) -> list[Message]:
        """The next batch: what the local queue holds now, without waiting; on an empty queue,
        a wait of at most ``batch_timeout_ms``.

        How an empty queue waits depends on the step before. After a batch taken without
        waiting (a backlog being read), the queue ran dry mid-backlog or at its end: the wait
        ends at the first message and takes what arrived with it, since what the last fetch of
        a backlog brings may be all there is (waiting for a whole batch held it for the full
        timeout: the ~0.2 s stalls of ``bench.catch_up``). Otherwise (a trickle) the wait is
        for a whole batch, so a slow stream is still gathered into batches, not handed over
        (decoded, processed, made durable by a service that does so per batch) one by one.
        """
        consume = self._consume
        size = self._batch_size
        messages = consume(size, 0)
        reading_backlog, self._reading_backlog = self._reading_backlog, bool(messages)
        if messages:
            return messages
        wait = self.settings.batch_timeout_ms / 1000
        if not reading_backlog:
            return consume(size, wait)
        messages = consume(1, wait)
        if messages and size > 1:
            more = consume(size - 1, 0)
            messages = self._left_by_rebalance(messages, self._window.from_before(messages))
            messages.extend(more)
        return messages

    def _consume(self, size: int, timeout: float) -> list[Message]:
        """One ``consume()`` call, without the messages it hands back for partitions its own
        rebalance took away (runtime.rebalance_window): their next owner reads them."""
        self._window.opened()
        messages = self._consumer.consume(num_messages=size, timeout=timeout)
        return self._left_by_rebalance(messages, self._window.from_the_call(messages))

    def _left_by_rebalance(self, messages: list[Message], kept: list[Message]) -> list[Message]:
        if len(kept) < len(messages):
            left = {partition_of(m) for m in messages} - {partition_of(m) for m in kept}
            log.info(
                "%s: messages fetched before %s was revoked (%d) left to the next owner, which "
                "reads them from the commit",
                self.name,
                _fmt(list(left)),
                len(messages) - len(kept),
            )
        return kept

    def _step(self) -> None:
        messages = self._take()
        if messages:
            self._process(messages)
        self.service.tick(int(time.time() * 1000))
        self.commits.commit(self._consumer)

    # --- waiting out a retryable failure ---------------------------------------------------
    def _enter_outage(self, problem: Problem) -> None:
        now = time.monotonic()
        if self._problem is None:
            self._problem_since = now
            log.warning(
                "%s: %s unavailable (%s); pausing consumption and retrying, nothing is committed "
                "meanwhile",
                self.name,
                problem.what,
                problem.detail,
            )
        else:
            log.info("%s: still waiting for %s: %s", self.name, problem.what, problem.detail)
        self._problem = problem
        self.health.unavailable[problem.what] = problem.detail
        self.metrics.unavailable(problem.what).set(1)
        self.metrics.retries(problem.what).inc()
        self._retry_at = now + self._backoff.next_delay()
        if not self._paused:
            self._consumer.pause([TopicPartition(t, p) for t, p in self._assigned])
            self._paused = True

    def _wait_or_retry(self) -> None:
        """Keep polling (membership, callbacks) until the backoff ends, then flush and commit."""
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            messages = self._consume(self._batch_size, min(wait, 1.0))
            if messages:  # fetched before the pause: processed and held like the rest
                self._process(messages)
            return
        self.service.tick(int(time.time() * 1000))
        self.commits.commit(self._consumer, force=True, wait_s=self.commits.bound())
        self._recovered()

    def _recovered(self) -> None:
        assert self._problem is not None
        log.warning(
            "%s: flush and commit went through after %.1fs without %s (%d retries); resuming",
            self.name,
            time.monotonic() - self._problem_since,
            self._problem.what,
            self._backoff.attempts,
        )
        for what in list(self.health.unavailable):
            # a commit with nothing to commit (partitions lost meanwhile) proves no link:
            # the Kafka entry stays until the client's statistics show a broker up
            if what == _KAFKA and self._brokers_down:
                continue
            self.metrics.unavailable(what).set(0)
            del self.health.unavailable[what]
        self._problem = None
        self._backoff.reset()
        if self._paused:
            self._consumer.resume(
                [TopicPartition(t, p) for t, p in self._assigned if (t, p) not in self._stopped]
            )
            self._paused = False

    def _replace_consumer(self) -> None:
        """A new Kafka client for a group stuck without its coordinator (runtime.group_watch),
        made only while no partitions are held and no commit is in flight: the new client
        joins the group and starts from its committed offsets, as a restarted process would,
        and the service holds nothing it could lose. Else a later statistics report asks
        again (a lost assignment and an abandoned commit come first). Made whether or not
        the client sees a broker: the stuck client this is for saw none, the broker being up.
        """
        self._replace_wanted = False
        if self._assigned or self.commits.requests or self._stop.is_set():
            return
        now = time.monotonic()
        self._retired = [t for t in self._retired if t.is_alive()]
        if len(self._retired) >= _MAX_CLOSING:
            log.warning(
                "%s: consumer group %s: %s; not replacing its Kafka client again while %d "
                "replaced ones are still closing",
                self.name,
                self.group,
                self._group.describe(now),
                len(self._retired),
            )
            self._group.restart(now)
            return
        log.warning(
            "%s: replacing its Kafka client: consumer group %s: %s",
            self.name,
            self.group,
            self._group.describe(now),
        )
        self._retire(self._consumer)
        self._consumer = self._new_consumer(self._consumer_config())
        self._subscribe()
        self._group.restart(now)
        self.metrics.client_replacements.inc()

    def _retire(self, consumer: Consumer) -> None:
        """Close a replaced client on a thread of its own: its close waits for what it still
        has queued for the coordinator, possibly for as long as the coordinator is away. The
        thread keeps it referenced (so that it is not destroyed, blocking, elsewhere) and is
        a daemon: the process does not wait for it."""

        def close() -> None:
            try:
                consumer.close()
            except Exception as exc:  # nothing is held by it: its own errors end with it
                log.warning(
                    "%s: the replaced Kafka client closed with an error: %s", self.name, exc
                )
                return
            log.info("%s: the replaced Kafka client is closed", self.name)

        closer = threading.Thread(target=close, name=f"{self.name}-retire", daemon=True)
        closer.start()
        self._retired.append(closer)

    def _turn(self) -> None:
        """One turn of the loop; a retryable failure is waited out, a fatal one raised."""
        if self._fatal_error is not None:
            raise self._fatal_error
        if self._replace_wanted:
            self._replace_consumer()
        try:
            if self._problem is None:
                self._step()
            else:
                self._wait_or_retry()
        except Exception as exc:
            problem = classify(exc)
            if problem is None:
                raise
            self._enter_outage(problem)

    def request_stop(self) -> None:
        self._stop.set()
        self.health.stopping = True

    def install_signal_handlers(self) -> None:
        stop_signals.install(self.name, self.request_stop)

    def run(self) -> int:
        """Consume until stopped; returns the process exit status."""
        self._http.start()
        self._subscribe()
        self.metrics.up.set(1)
        log.info(
            "%s (pid %d) consuming %s as group %s; metrics on %s:%d; %s consume path",
            self.name,
            os.getpid(),
            self._topic,
            self.group,
            self.settings.metrics_host,
            self.metrics_port,
            "raw-record"
            if self._raw is not None
            else "compiled"
            if self._codec.decode_native is not None
            else "Python",
        )
        durability = start_durability_check(
            self.settings, design_topic_names(self.settings), self.name
        )
        status = 0
        try:
            with service_gc(freeze_survivors=self.service.keeps_state) as self._gc:
                while not self._stop.is_set():
                    self._turn()
                    self.health.beat()
        except KafkaAuthError as exc:
            log.error("%s: %s; stopping", self.name, exc)
            status = 1
        except KafkaException as exc:
            log.error("%s: fatal Kafka error, stopping without commit: %s", self.name, exc)
            status = 1
        except DeadLetterError as exc:
            log.error("%s: %s; stopping without commit", self.name, exc)
            status = 1
        except Exception:
            log.exception("%s: handler failed, stopping without commit", self.name)
            status = 1
        self.metrics.up.set(0)
        durability.join(timeout=CHECK_TIMEOUT_S)
        self._gc = None  # automatic collections are back as they were
        # After a failure, the revoke inside consumer.close() must not commit either.
        self._failed = status != 0 or self._problem is not None
        return self._shutdown(status)

    def _shutdown(self, status: int) -> int:
        bound = self.settings.shutdown_timeout_s
        deadline = time.monotonic() + bound
        # past the bound the process exits anyway: with the fatal error's status when there
        # is one (what stopped it), else 2
        watchdog = threading.Timer(bound, _force_exit, args=(status or 2,))
        watchdog.daemon = True
        watchdog.start()
        try:
            if status == 0 and self._problem is None:
                self._final_commit(deadline)
            elif status == 0:
                log.warning(
                    "%s: stopping while %s is unavailable: nothing more is committed (the next "
                    "start re-reads from the last commit)",
                    self.name,
                    self._problem.what if self._problem else "an output",
                )
            self._close_consumer(deadline)  # its revoke callback commits again: a no-op by now
            self.service.close()
            # dead letters a fatal error left cannot be sent: they are read again at the next start
            self._dlq.close(timeout=_DLQ_CLOSE_FAILED_S if self._failed else 5.0)
        except Exception:
            log.exception("%s: error during shutdown", self.name)
            status = status or 1
        finally:
            watchdog.cancel()
            self._http.stop()
        log.info("%s stopped (status %d)", self.name, status)
        return status

    def _final_commit(self, deadline: float) -> None:
        """The last flush and commit, within the shutdown bound; a commit with no result in
        time (the broker went away) is not retried: the next start re-reads from the last one."""
        # the close and the other outputs' closes need some of the bound too
        bound = max(0.1, min(self.commits.bound(), (deadline - time.monotonic()) / 3))
        try:
            self.commits.commit(self._consumer, force=True, wait_s=bound, keep_messages=False)
        except Exception as exc:
            if classify(exc) is None:
                raise
            self._failed = True  # nor in the revoke inside close()
            log.warning(
                "%s: the final commit did not go through (%s); nothing more is committed (the "
                "next start re-reads from the last commit)",
                self.name,
                exc,
            )

    def _close_consumer(self, deadline: float) -> None:
        """``Consumer.close()`` leaves the group; with a commit in flight and the broker away
        it waits for that commit without a bound. Run it on a thread and give up at the
        deadline: the group then notices the member gone after ``session.timeout.ms``. The
        thread keeps the consumer referenced so that it is not destroyed (blocking) at exit."""
        closer = threading.Thread(
            target=self._consumer.close, name=f"{self.name}-close", daemon=True
        )
        closer.start()
        bound = deadline - time.monotonic() - _SHUTDOWN_MARGIN_S
        if self._failed or self.commits.requests:  # it would wait for the broker
            bound = min(bound, _CLOSE_UNREACHABLE_S)
        closer.join(max(0.1, bound))
        if closer.is_alive():
            log.warning(
                "%s: the Kafka client did not close in time (a commit or the group leave "
                "waits for the broker); exiting without it",
                self.name,
            )


_PINNED = {"enable.auto.commit", "enable.auto.offset.store", "group.id"}
#: librdkafka's default fetch.max.bytes; raised when max_event_bytes needs more
_LIBRDKAFKA_FETCH_MAX = 52_428_800
_LIBRDKAFKA_RECEIVE_MAX = 100_000_000
#: left of the shutdown bound for the outputs' own closes after the Kafka client's
_SHUTDOWN_MARGIN_S = 2.0
#: how long close() gets when a commit is in flight or the broker is known away
_CLOSE_UNREACHABLE_S = 3.0
#: how long the dead letters get at a stop after a failure (nothing more is committed)
_DLQ_CLOSE_FAILED_S = 1.0
#: the health/metrics name of the Kafka link itself
_KAFKA = "kafka"
#: the health/metrics name of the source topic (while it does not exist)
_TOPIC = "topic"
#: the health/metrics name of the consumer group's coordinator (runtime.group_watch)
_GROUP = "consumer group"
#: replaced Kafka clients that may be closing at once (each close may wait for the broker)
_MAX_CLOSING = 2
#: errors the client reports that waiting cannot fix
_FATAL_LINK_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


def _force_exit(status: int) -> None:
    log.error("shutdown exceeded its time bound; exiting (status %d)", status)
    os._exit(status)


def _fmt(parts: list[Partition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(parts)) or "nothing"


__all__ = ["ServiceRunner"]
