"""Live updates of a run page: its events as they reach the topic, as server-sent events.

A consumer with no group is assigned the run's partition (the key is the run ID) at an
offset: each SSE message's ``id`` is ``partition:offset``, so a browser reconnecting with
``Last-Event-ID`` resumes at the next offset and loses nothing. The page starts the stream at
the audit store's position for that partition, read *before* the chain it rendered: every
event before it is on the page, later ones arrive here (the page drops a sequence it already
shows). Only events of the caller's tenant and run are sent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.events.codec import EventCodec
from runtrail.resume.partitioning import partition_for

log = logging.getLogger(__name__)

#: How long one poll waits before the stream sends a keep-alive comment.
POLL_S = 1.0


class Partitions:
    """The partition of a run's events (murmur2 of the key, as the publisher places it), from
    the topic's partition count, asked of the broker once; while no broker answers, a page
    asks again at most every ``retry_s`` and renders without live updates meanwhile."""

    def __init__(self, settings: Settings, timeout_s: float = 3.0, retry_s: float = 30.0) -> None:
        self._settings = settings
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._count: int | None = None
        self._failed_at: float | None = None
        self._lock = threading.Lock()

    def _partition_count(self) -> int:
        consumer = Consumer(
            self._settings.kafka_config(**{"group.id": f"runtrail-ui-{uuid.uuid4().hex}"})
        )
        try:
            topic = self._settings.events_topic
            meta = consumer.list_topics(topic, timeout=self._timeout_s)
            found = meta.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise LookupError(f"topic {topic} has no partitions ({found and found.error})")
            return len(found.partitions)
        finally:
            consumer.close()

    def of(self, run_id: str) -> int | None:
        with self._lock:
            if self._count is None:
                now = time.monotonic()
                if self._failed_at is not None and now - self._failed_at < self._retry_s:
                    return None
                try:
                    self._count = self._partition_count()
                except (KafkaException, LookupError) as exc:
                    log.info("ui live: no partition count: %s", exc)
                    self._failed_at = now
                    return None
            return partition_for(run_id, self._count)


def parse_position(text: str | None) -> tuple[int, int] | None:
    """``partition:offset`` as sent in an SSE ``id``; None when absent or malformed."""
    if not text:
        return None
    partition, sep, offset = text.strip().partition(":")
    if not sep or not partition.isdigit() or not offset.lstrip("-").isdigit():
        return None
    return int(partition), int(offset)


def _message(kind: str, ident: str | None, data: Any) -> bytes:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


async def stream(
    settings: Settings, tenant: str, run_id: str, partition: int, start: int
) -> AsyncIterator[bytes]:
    """SSE bytes: the run's events from ``start`` on, until the client goes away."""
    codec = EventCodec()
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"runtrail-ui-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
    )
    key = run_id.encode()
    # poll runs in a worker thread; a client that leaves cancels this generator mid-poll, so
    # close waits for that poll under the same lock, in a thread of its own (never blocks)
    lock = threading.Lock()

    def poll() -> Any:
        with lock:
            return consumer.poll(POLL_S)

    def close() -> None:
        with lock:
            consumer.close()

    try:
        consumer.assign([TopicPartition(settings.events_topic, partition, max(start, 0))])
        yield b"retry: 1000\n\n"
        while True:
            message = await asyncio.to_thread(poll)
            if message is None:
                yield b": keep-alive\n\n"
                continue
            if message.error() is not None:
                log.warning("ui live: %s", message.error())
                continue
            if message.key() != key:
                continue
            ident = f"{message.partition()}:{message.offset()}"
            try:
                event = codec.decode_written(message.value())
            except Exception as exc:  # undecodable bytes (no tenant to check): the DLQ's business
                log.debug("ui live: skipping %s: %s", ident, exc)
                continue
            if event.get("tenantId") != tenant or event.get("runId") != run_id:
                continue
            yield _message("runtrail-event", ident, event)
    except KafkaException as exc:
        log.warning("ui live: %s", exc)
    finally:
        threading.Thread(target=close, name="runtrail-ui-live-close", daemon=True).start()
