"""Live updates of run pages: their events as they reach the topic, as server-sent events.

One consumer per explorer process (:class:`LiveHub`), with no group, is assigned every
partition of the events topic at its end when the first page follows, and hands each message
to the streams following its run (the key is the run ID): 200 open pages cost one consumer
and one poll loop, not 200. Each SSE message's ``id`` is ``partition:offset``, so a browser
reconnecting with ``Last-Event-ID`` resumes at the next offset and loses nothing. The page
starts its stream at the audit store's position for that partition, read *before* the chain
it rendered: every event before it is on the page, later ones arrive here (the page drops a
sequence it already shows).

A stream whose start lies before the hub's position in that partition (the audit store lags,
or a reconnect after a long absence) first reads the gap with a consumer of its own, up to
the position the hub had when the stream subscribed; from there on the hub delivers. Offsets
only increase on a stream: an overlap is dropped, a gap cannot happen. Only events of the
caller's tenant and run are sent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.events.codec import EventCodec
from runtrail.resume.partitioning import partition_for
from runtrail.whole_numbers import signed_number, whole_number

log = logging.getLogger(__name__)

#: How long one poll of a catch-up read waits.
POLL_S = 1.0
#: How long a stream stays silent before it sends a keep-alive comment.
KEEP_ALIVE_S = 15.0
#: How long after failing to start (no broker) the hub tries again.
RETRY_S = 30.0
#: How long the hub's poll waits (also how soon it sees that it is closed).
HUB_POLL_S = 0.2


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
    at, position = whole_number(partition), signed_number(offset)
    if not sep or at is None or position is None:
        return None
    return at, position


def format_positions(positions: dict[int, int]) -> str:
    """``0:12,1:40``: the hub's position in each partition, as a runs list carries it."""
    return ",".join(f"{partition}:{offset}" for partition, offset in sorted(positions.items()))


def parse_positions(query: Any) -> dict[int, int] | None:
    """The ``from`` of a runs list's stream (:func:`format_positions`); None when absent or
    malformed (the stream then names no run it may have missed)."""
    text = query.get("from") if query is not None else None
    if not text:
        return None
    found = [parse_position(part) for part in str(text).split(",")]
    if any(item is None for item in found):
        return None
    return dict(item for item in found if item is not None)


def _message(kind: str, ident: str | None, data: Any) -> bytes:
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {kind}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


#: What a stream receives: (partition, offset, the event as written).
Delivery = tuple[int, int, dict[str, Any]]


@dataclass(eq=False)
class _Follower:
    """One open stream: its runs, its tenant, where it wants the hub's messages delivered."""

    tenant: str
    run_ids: frozenset[str]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Delivery] = field(default_factory=asyncio.Queue)

    def deliver(self, item: Delivery) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


def _decoded(codec: EventCodec, value: bytes | None, where: str) -> dict[str, Any] | None:
    try:
        return codec.decode_written(value)
    except Exception as exc:  # undecodable bytes (no tenant to check): the DLQ's business
        log.debug("ui live: skipping %s: %s", where, exc)
        return None


class LiveHub:
    """The explorer's one consumer of the events topic, feeding every open stream.

    Started by the first stream (no broker: no consumer, pages open without live updates),
    closed with the app. Followers are found by the message key, so a message no page follows
    is not decoded."""

    def __init__(self, settings: Settings, start_timeout_s: float = 10.0) -> None:
        self._settings = settings
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._followers: dict[bytes, set[_Follower]] = {}
        #: per partition, the offset after the last message the hub handed out
        self._next: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failed: str | None = None
        self._failed_at = 0.0
        self._stop = threading.Event()

    # --- the consumer thread ------------------------------------------------------------
    def _consumer(self) -> Consumer:
        return Consumer(
            self._settings.kafka_config(
                **{
                    "group.id": f"runtrail-ui-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": False,
                }
            )
        )

    def _assign_at_end(self, consumer: Consumer) -> None:
        topic = self._settings.events_topic
        meta = consumer.list_topics(topic, timeout=self._start_timeout_s)
        found = meta.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise LookupError(f"topic {topic} has no partitions ({found and found.error})")
        ends = {}
        for partition in sorted(found.partitions):
            tp = TopicPartition(topic, partition)
            ends[partition] = consumer.get_watermark_offsets(tp, timeout=self._start_timeout_s)[1]
        consumer.assign([TopicPartition(topic, p, end) for p, end in ends.items()])
        with self._lock:
            self._next = ends

    def _run(self) -> None:
        codec = EventCodec()
        try:
            consumer = self._consumer()
        except KafkaException as exc:
            self._fail(str(exc))
            return
        try:
            try:
                self._assign_at_end(consumer)
            except (KafkaException, LookupError) as exc:
                self._fail(str(exc))
                return
            finally:
                self._ready.set()
            while not self._stop.is_set():
                try:
                    messages = consumer.consume(500, HUB_POLL_S)
                except KafkaException as exc:
                    log.warning("ui live: %s", exc)
                    continue
                for message in messages:
                    if message.error() is None:
                        self._dispatch(codec, message)
        finally:
            consumer.close()

    def _fail(self, why: str) -> None:
        self._failed_at = time.monotonic()
        self._failed = why
        self._ready.set()

    def _dispatch(self, codec: EventCodec, message: Any) -> None:
        partition, offset = message.partition(), message.offset()
        with self._lock:  # a follower subscribing now sees this offset in _next or its queue
            self._next[partition] = offset + 1
            followers = list(self._followers.get(message.key() or b"", ()))
            if not followers:
                return
            event = _decoded(codec, message.value(), f"{partition}:{offset}")
            if event is None:
                return
            for follower in followers:
                if (
                    event.get("tenantId") == follower.tenant
                    and event.get("runId") in follower.run_ids
                ):
                    follower.deliver((partition, offset, event))

    def _started(self) -> bool:
        """Start the consumer once; wait until it is assigned. False when it could not be
        (no broker): a stream then asks again at most every ``RETRY_S``."""
        with self._lock:
            failed = self._thread is not None and self._failed is not None
            if failed and time.monotonic() - self._failed_at > RETRY_S:
                self._thread, self._failed = None, None
                self._ready.clear()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="runtrail-ui-live", daemon=True
                )
                self._thread.start()
        self._ready.wait(self._start_timeout_s * 3)
        return self._ready.is_set() and self._failed is None

    # --- followers ----------------------------------------------------------------------
    def _follow(
        self, tenant: str, run_ids: frozenset[str], partition: int
    ) -> tuple[_Follower, int]:
        follower = _Follower(tenant, run_ids, asyncio.get_running_loop())
        with self._lock:
            for run_id in run_ids:
                self._followers.setdefault(run_id.encode(), set()).add(follower)
            return follower, self._next.get(partition, 0)

    def _leave(self, follower: _Follower) -> None:
        with self._lock:
            for run_id in follower.run_ids:
                key = run_id.encode()
                followers = self._followers.get(key)
                if followers is not None:
                    followers.discard(follower)
                    if not followers:
                        del self._followers[key]

    def following(self) -> int:
        """How many streams are open (for tests and the benchmark)."""
        with self._lock:
            return len({id(f) for followers in self._followers.values() for f in followers})

    async def stream(
        self, tenant: str, run_id: str, partition: int, start: int
    ) -> AsyncIterator[bytes]:
        """SSE bytes: the run's events from offset ``start`` on, until the client goes away."""
        if not await asyncio.to_thread(self._started):
            log.warning("ui live: no consumer: %s", self._failed)
            yield b"retry: 5000\n\n"
            return
        follower, handed_over = self._follow(tenant, frozenset((run_id,)), partition)
        last = max(start, 0) - 1
        try:
            yield b"retry: 1000\n\n"
            if last + 1 < handed_over:
                async for item in catch_up(
                    self._settings, tenant, run_id, partition, last + 1, handed_over
                ):
                    last = item[1]
                    yield _message("runtrail-event", f"{item[0]}:{item[1]}", item[2])
            while True:
                try:
                    item = await asyncio.wait_for(follower.queue.get(), KEEP_ALIVE_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if item[0] != partition or item[1] <= last:
                    continue
                last = item[1]
                yield _message("runtrail-event", f"{item[0]}:{item[1]}", item[2])
        finally:
            self._leave(follower)

    def positions(self) -> dict[int, int] | None:
        """Where the hub is in each partition (starting it), or None with no consumer: a runs
        list renders it, and its stream says which runs to read again if the hub moved on
        before the stream subscribed."""
        if not self._started():
            return None
        with self._lock:
            return dict(self._next)

    async def runs_stream(
        self, tenant: str, run_ids: frozenset[str], since: dict[int, int] | None = None
    ) -> AsyncIterator[bytes]:
        """SSE bytes for a runs list: the ID of a shown run each time an event of it arrives
        (the list re-reads the run's row). Events between ``since`` (the hub's positions when
        the list was rendered) and the subscription are not known one by one: then every shown
        run is named once with no sequence, and the list reads its rows again until they
        settle."""
        if not await asyncio.to_thread(self._started):
            yield b"retry: 5000\n\n"
            return
        follower, _ = self._follow(tenant, run_ids, -1)
        with self._lock:
            handed_over = dict(self._next)
        try:
            yield b"retry: 1000\n\n"
            if since is not None and any(
                offset > since.get(partition, offset) for partition, offset in handed_over.items()
            ):
                for run_id in sorted(run_ids):
                    yield _message("runtrail-run", None, {"runId": run_id, "sequence": None})
            while True:
                try:
                    item = await asyncio.wait_for(follower.queue.get(), KEEP_ALIVE_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                run = {"runId": item[2].get("runId"), "sequence": item[2].get("sequence")}
                yield _message("runtrail-run", None, run)
        finally:
            self._leave(follower)

    def close(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)


async def catch_up(
    settings: Settings, tenant: str, run_id: str, partition: int, start: int, end: int
) -> AsyncIterator[Delivery]:
    """The run's events in ``[start, end)`` of one partition, read by a consumer of its own
    (the gap before the hub's position when a stream subscribed)."""
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
    topic = settings.events_topic
    key = run_id.encode()
    # poll runs in a worker thread; a client that leaves cancels this generator mid-poll, so
    # close waits for that poll under the same lock, in a thread of its own (never blocks)
    lock = threading.Lock()

    def poll() -> tuple[Any, int]:
        with lock:
            message = consumer.poll(POLL_S)
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            return message, position

    def close() -> None:
        with lock:
            consumer.close()

    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        while True:
            message, position = await asyncio.to_thread(poll)
            if message is not None and message.error() is None and message.offset() < end:
                if message.key() == key:
                    where = f"{message.partition()}:{message.offset()}"
                    event = _decoded(codec, message.value(), where)
                    if event and event.get("tenantId") == tenant and event.get("runId") == run_id:
                        yield message.partition(), message.offset(), event
            elif message is not None and message.error() is not None:
                log.warning("ui live: %s", message.error())
            if position >= end or (message is not None and message.offset() >= end - 1):
                return
    except KafkaException as exc:
        log.warning("ui live: %s", exc)
    finally:
        threading.Thread(target=close, name="runtrail-ui-live-close", daemon=True).start()
