"""Restore a session: its latest snapshot, then the events after it, replayed from the topic.

Seed 002: "load the latest trusted snapshot if one exists; replay subsequent events in
sequence". The snapshot records, per partition of the events topic, the offset after the last
event it applied; the tail is read from there to the end of each partition (from the start of
partitions the snapshot never read), decoded exactly as the services decode it
(:class:`~runtrail.runtime.decoding.BatchDecoder`), and the session's events are applied.
Applying is idempotent per (run, sequence), so an event both in the snapshot and in the tail
counts once. Nothing calls a model or a tool: only recorded events are read.

:func:`build_from_topic` is the same replay from offset zero with no snapshot — the reference
a restored session must equal.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, Message

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.kafka.consumer_config import consumer_config
from runtrail.kafka.to_end import ReadTimeout, read_to_end, spans
from runtrail.runtime.decoding import BatchDecoder
from runtrail.runtime.delivery import Delivered
from runtrail.runtime.sequencing import new_sequence_checker
from runtrail.sessions.errors import SessionStoreError
from runtrail.sessions.session import AgentSession
from runtrail.sessions.snapshot import AgentSessionSnapshot
from runtrail.sessions.store import AgentSessionStore

#: How long reading the topic to its end may take before the restore gives up.
READ_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Restored:
    """A restored session, the snapshot it started from, and how many events were replayed."""

    session: AgentSession
    snapshot: AgentSessionSnapshot | None
    replayed: int
    read: int


def read_events(
    settings: Settings,
    start: Mapping[int, int] | None = None,
    *,
    topic: str | None = None,
    timeout_s: float | None = None,
) -> Iterator[Delivered]:
    """Every decodable event of ``topic`` from ``start`` (partition -> offset; the beginning
    where absent) up to the end each partition had when reading began
    (:func:`runtrail.kafka.to_end.read_to_end`: transaction markers, aborted transactions'
    records and compacted or deleted offsets at the end do not hold it)."""
    name = topic or settings.events_topic
    consumer = Consumer(
        consumer_config(
            settings,
            **{
                "group.id": f"runtrail-sessions-restore-{uuid.uuid4()}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
            },
        )
    )
    try:
        metadata = consumer.list_topics(name, timeout=30).topics.get(name)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise SessionStoreError(f"cannot read topic {name}: it does not exist")
        ranges = spans(consumer, name, sorted(metadata.partitions), start)
        decoder = BatchDecoder(
            EventCodec(settings.extra_schema_dirs), new_sequence_checker(), _skip
        )
        try:
            for messages in read_to_end(
                consumer, name, ranges, timeout=timeout_s or READ_TIMEOUT_S
            ):
                yield from decoder.decode_batch(messages).delivered
        except ReadTimeout as exc:
            raise SessionStoreError(str(exc)) from exc
    finally:
        consumer.close()


def _skip(msg: Message, reason: str, detail: str) -> None:
    """Undecodable messages were dead-lettered by the services; a replay skips them too."""


def replay_into(
    session: AgentSession,
    settings: Settings,
    start: Mapping[int, int] | None = None,
    *,
    topic: str | None = None,
) -> tuple[int, int]:
    """Apply the session's events from the topic; returns (newly applied, events read)."""
    name = topic or settings.events_topic
    applied = read = 0
    for delivered in read_events(settings, start, topic=name):
        read += 1
        event = delivered.event
        if event.tenant_id == session.tenant_id and event.session_id == session.session_id:
            source = (delivered.topic, delivered.partition, delivered.offset)
            applied += session.apply(event, source=source)
    return applied, read


def restore_session(
    store: AgentSessionStore,
    tenant_id: str,
    session_id: str,
    settings: Settings,
    *,
    topic: str | None = None,
) -> Restored:
    """The latest stored snapshot (verified) plus the tail of the events topic after it."""
    name = topic or settings.events_topic
    snapshot = store.load(tenant_id, session_id)
    session = AgentSession(tenant_id, session_id)
    start: dict[int, int] = {}
    if snapshot is not None:
        session.restore(snapshot)
        start = {int(p): o for p, o in snapshot.next_offsets.get(name, {}).items()}
    replayed, read = replay_into(session, settings, start, topic=name)
    return Restored(session, snapshot, replayed, read)


def build_from_topic(
    tenant_id: str, session_id: str, settings: Settings, *, topic: str | None = None
) -> AgentSession:
    """The session rebuilt from every event of the topic, from offset zero."""
    session = AgentSession(tenant_id, session_id)
    replay_into(session, settings, None, topic=topic)
    return session
