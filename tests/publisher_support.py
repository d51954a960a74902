"""Reading a topic back for the publisher tests: every event once, each run in sequence order."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from runtrail.config import Settings
from runtrail.events import Event, EventCodec

CODEC = EventCodec()


def agent_settings(bootstrap: str, topic: str, spool: Path, **more: Any) -> Settings:
    """The settings of an agent's publisher in these tests: tenant ``t1``, its spool in ``spool``."""
    return Settings(
        bootstrap_servers=bootstrap, spool_dir=spool, tenant="t1", events_topic=topic, **more
    )


def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 60.0) -> list[Any]:
    """Everything on ``topic`` from the beginning (waits for ``expect``, then a little more)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out += [m for m in consumer.consume(500, 0.5) if m.error() is None]
        out += [m for m in consumer.consume(500, 2.0) if m.error() is None]  # any duplicates
    finally:
        consumer.close()
    return out


@dataclass
class TopicContents:
    """What a topic holds, in partition order."""

    events: list[Event] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_run: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))

    @property
    def doubled(self) -> dict[str, int]:
        return {k: n for k, n in self.counts.items() if n > 1}


def contents(bootstrap: str, topic: str, expect: int, timeout: float = 60.0) -> TopicContents:
    messages = read_all(bootstrap, topic, expect, timeout)
    out = TopicContents()
    for message in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        event = CODEC.decode(message.value()).event
        assert message.key() == event.run_id.encode()
        out.events.append(event)
        out.counts[event.event_id] += 1
        out.per_run[(event.tenant_id, event.run_id)].append(event.sequence)
    return out


def assert_in_order(found: TopicContents) -> None:
    """Each (tenant, run): sequences 1..n in partition order, none missing, none doubled."""
    for run, seqs in found.per_run.items():
        assert seqs == list(range(1, len(seqs) + 1)), (run, seqs)
