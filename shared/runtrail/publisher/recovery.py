"""Which of some events already reached the topic: the check that makes resends exactly-once.

Why: an event whose delivery was never confirmed (in flight when the broker went away, or
when the agent died) may or may not be on the topic. Resending it blindly doubles it; not
resending it may lose it. Before the publisher resends such events from the write-ahead
spool, it reads every partition of the topic from the earliest accept time among them (each
event carries its accept time as its Kafka timestamp, and ``offsets_for_times`` returns the
first offset at or after a time, so nothing of ours can lie before it) up to the high
watermark, and collects the ``rt.event_id`` headers it sees. Only headers are looked at.

A restarted publisher also learns from its spool which sequences the runs in it reached
(:func:`spooled_sequences`), so it numbers those runs after them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Collection, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.to_end import ReadTimeout, Span, read_to_end
from runtrail.publisher.sequencing import RunKey
from runtrail.publisher.wal import Wal

log = logging.getLogger(__name__)

#: Read from this long before the earliest accept time (clock steps, LogAppendTime topics).
SLACK_MS = 60_000
#: Records read from the spool at a time.
READ_CHUNK = 5000
#: The broker's answers when a principal lacks READ on the topic or its (throwaway) group.
_READ_REFUSALS = frozenset(
    {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
)


def look_up_unconfirmed(
    client_config: Mapping[str, Any], topic: str, wal: Wal, start: int, until: int, timeout: float
) -> set[str] | None:
    """The eventIds of the spooled events in ``[start, until)`` found on ``topic``; None when
    the topic cannot be read yet (the caller retries later)."""
    ids: set[str] = set()
    since: int | None = None
    pos = wal.position_of(start)
    while pos.index < until:
        entries = wal.read(pos, READ_CHUNK)
        if not entries:
            break
        for entry in entries:
            record = entry.record
            if entry.index < start or entry.index >= until or record is None:
                continue
            if record.event_id is None or record.timestamp_ms is None:
                continue  # a JSON-lines spool record (no id): resent at least once
            ids.add(record.event_id)
            if since is None or record.timestamp_ms < since:
                since = record.timestamp_ms
        pos = entries[-1].end
    if since is None:
        return set()
    try:
        return already_on_topic(client_config, topic, ids, since, timeout)
    except KafkaException as exc:
        if not _read_refused(exc):
            log.warning("cannot look up unconfirmed events on %s yet: %s", topic, exc)
            return None
    # a least-privilege agent may write the topic but not read it: resend unchecked (at least
    # once; every consumer skips an eventId it has already seen)
    log.warning(
        "this publisher may not read %s, so its %d unconfirmed event(s) are resent "
        "without looking them up; a consumer skips any it already has",
        topic,
        len(ids),
    )
    return set()


def spooled_sequences(wal: Wal) -> dict[RunKey, int]:
    """Per (tenant, run) in the spool from its cursor, the sequence after the last one held:
    those events reach the topic before anything new, so new ones are numbered after them."""
    after: dict[RunKey, int] = {}
    pos = wal.cursor
    while True:
        entries = wal.read(pos, READ_CHUNK)
        if not entries:
            return after
        for entry in entries:
            record = entry.record
            if record is None or record.sequence is None or record.key is None:
                continue
            tenant = dict(record.headers).get("rt.tenant", b"").decode("utf-8", "replace")
            key = (tenant, record.key.decode("utf-8", "replace"))
            if record.sequence + 1 > after.get(key, 1):
                after[key] = record.sequence + 1
        pos = entries[-1].end


def already_on_topic(
    client_config: Mapping[str, Any],
    topic: str,
    event_ids: Collection[str],
    since_ms: int,
    timeout: float = 30.0,
) -> set[str]:
    """The members of ``event_ids`` found on ``topic`` at or after ``since_ms``.

    Raises ``KafkaException`` when the topic cannot be read (the caller retries later).
    """
    wanted = set(event_ids)
    if not wanted:
        return set()
    deadline = time.monotonic() + timeout
    consumer = Consumer(
        {
            **client_config,
            "group.id": f"runtrail-publisher-recovery-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "logger": client_logger("runtrail.publisher.librdkafka"),
        }
    )
    found: set[str] = set()
    try:
        metadata = consumer.list_topics(topic, timeout=max(1.0, deadline - time.monotonic()))
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
        since = max(0, since_ms - SLACK_MS)
        starts = consumer.offsets_for_times(
            [TopicPartition(topic, p, since) for p in described.partitions],
            timeout=max(1.0, deadline - time.monotonic()),
        )
        ranges = []
        for tp in starts:
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset < 0:
                continue  # no message at or after ``since``
            _, high = consumer.get_watermark_offsets(
                tp, timeout=max(1.0, deadline - time.monotonic())
            )
            ranges.append(Span(tp.partition, tp.offset, high))
        read = 0
        try:
            batches = read_to_end(
                consumer, topic, ranges, timeout=max(0.0, deadline - time.monotonic()), poll_s=0.5
            )
            for batch in batches:
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        raise KafkaException(err)
                    read += 1
                    event_id = _event_id(msg.headers())
                    if event_id is not None and event_id in wanted:
                        found.add(event_id)
        except ReadTimeout as exc:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, str(exc))) from exc
        log.info(
            "recovery scan of %s: %d of %d unconfirmed events already there (%d messages read)",
            topic,
            len(found),
            len(wanted),
            read,
        )
        return found
    finally:
        consumer.close()


def _event_id(headers: Any) -> str | None:
    """The ``rt.event_id`` header of a consumed message (a list of pairs), if any."""
    for name, value in headers or ():
        if name == "rt.event_id" and value is not None:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def _read_refused(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and err.code() in _READ_REFUSALS


class Unconfirmed:
    """The spooled events whose fate is unknown (those below :attr:`until`) and the ones of
    them already found on the topic, which a resend settles instead of sending again.

    Callers hold the publisher's ``lock``; :meth:`scan` takes it itself, and reads the topic
    without it.
    """

    def __init__(self, settings: Settings, topic: str, wal: Wal, lock: threading.RLock) -> None:
        self._settings = settings
        self._topic = topic
        self._wal = wal
        self._lock = lock
        # events found beyond the cursor at start may be on the topic already
        self._until = wal.end.index
        self._scanned = False
        self._found: set[str] = set()

    def widen(self, next_index: int) -> None:
        """Every event before ``next_index`` may be on the topic now: look again first."""
        self._until = max(self._until, next_index)
        self._scanned = False

    def needs_scan(self, start: int) -> bool:
        """Whether a resend from ``start`` must look up the topic first."""
        return not self._scanned and start < self._until

    def scan(self, start: int) -> bool:
        """Look up on the topic the unconfirmed events from ``start``; False if it cannot."""
        with self._lock:
            until = self._until
        found = look_up_unconfirmed(
            self._settings.kafka_config(),
            self._topic,
            self._wal,
            start,
            until,
            self._settings.delivery_timeout_ms / 1000 + 10,
        )
        if found is None:
            return False
        with self._lock:
            self._found |= found
            self._scanned = True
        return True

    def take_found(self, event_id: str | None) -> bool:
        """True, once, for an event the scan found on the topic (it is not sent again)."""
        if event_id is None or event_id not in self._found:
            return False
        self._found.discard(event_id)
        return True
