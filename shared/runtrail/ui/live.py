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


def run_partition(settings: Settings, run_id: str) -> int:
    """The partition of the run's events (murmur2 of the key, as the publisher places it)."""
    consumer = Consumer(settings.kafka_config(**{"group.id": f"runtrail-ui-{uuid.uuid4().hex}"}))
    try:
        meta = consumer.list_topics(settings.events_topic, timeout=10)
        partitions = len(meta.topics[settings.events_topic].partitions)
    finally:
        consumer.close()
    return partition_for(run_id, partitions)


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
    try:
        consumer.assign([TopicPartition(settings.events_topic, partition, max(start, 0))])
        yield b"retry: 1000\n\n"
        while True:
            message = await asyncio.to_thread(consumer.poll, POLL_S)
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
        await asyncio.to_thread(consumer.close)
