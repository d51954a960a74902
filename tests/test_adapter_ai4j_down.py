"""With no broker, the ai4j adapter never takes the agent down, spools, and loses nothing.

A real ai4j agent runs against a bootstrap address nothing listens on, with a small queue and
2 s timeouts (``Driver down``): the agent completes its runs and nothing is thrown into it.

* Without a spool, every event is accounted for: skipped (no runtrail type), dropped (queue
  full) or failed (not delivered in time), the reason kept as ``lastError``.
* With a spool (the default), every accepted event waits in it, in the Python publisher's
  line format; a new listener on the same folder, with the broker back, resends them before
  its own run's events, and the topic then holds every event of every run, each once.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from runtrail.events.codec import EventCodec
from runtrail.publisher.legacy_spool import parse_line
from tests.ai4j_adapter import adapter
from tests.support import consume_all, create_topic, unique_topic

RUN_EVENTS = 21  # the scripted run: 18 of runtrail types, 2 STEP_START, 1 FINAL_OUTPUT
# what the adapter publishes of it: the 18, run.accepted + run.state_transitioned before them,
# run.succeeded (FINAL_OUTPUT) after them
PER_RUN = 18 + 3
ADDED = 2  # events of the adapter's own, beyond ai4j's (FINAL_OUTPUT is run.succeeded)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_broker_no_spool_every_event_counted() -> None:
    down = f"127.0.0.1:{closed_port()}"
    result = adapter().run("down", down, "3", "1", "-", "-", "runtrail.events")
    stats = result["stats"]
    assert result["events"] == RUN_EVENTS  # the agent ran to the end
    skipped = stats["skipped.STEP_START"]
    assert stats["published"] == stats["inFlight"] == stats["spooled"] == 0
    assert stats["dropped"] > 0 and stats["failed"] == stats["accepted"] > 0
    assert stats["accepted"] + stats["dropped"] + skipped == result["events"] + ADDED
    assert "TimeoutException" in stats["lastError"] or "never sent" in stats["lastError"]


@pytest.mark.kafka
def test_no_broker_spools_then_the_next_listener_resends_everything(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j-spool"), partitions=3)
    spool_dir = tmp_path / "spool"
    down = f"127.0.0.1:{closed_port()}"
    result = adapter().run("down", down, "3", "2", str(spool_dir), kafka_bootstrap, topic)
    stats = result["stats"]
    assert result["events"] == 2 * RUN_EVENTS
    assert stats["published"] == stats["failed"] == stats["dropped"] == 0
    assert stats["spooled"] == 2 * PER_RUN  # the queue's overflow went there too
    spool_file = spool_dir / "acme" / f"{topic.replace('.', '%2E')}.ai4j.spool"
    assert (spool_dir / "acme").stat().st_mode & 0o777 == 0o700
    assert spool_file.stat().st_mode & 0o777 == 0o600
    assert result["drained"] is True
    after = result["after"]
    assert after["published"] == 3 * PER_RUN and after["spoolDepth"] == 0
    assert spool_file.read_bytes() == b""
    codec = EventCodec()
    msgs = consume_all(kafka_bootstrap, topic, expect=3 * PER_RUN)
    events = [codec.decode(m.value()).event for m in msgs]
    assert len({e.event_id for e in events}) == 3 * PER_RUN  # each once
    by_run: dict[str, list[int]] = {}
    for e in events:
        by_run.setdefault(e.run_id, []).append(e.sequence)
    assert {r: sorted(s) for r, s in by_run.items()} == {
        r: list(range(1, PER_RUN + 1)) for r in ("down-0", "down-1", "after-2")
    }


def test_the_spool_holds_python_spool_records(tmp_path: Path) -> None:
    """What the Java spool wrote reads back with the Python ``SpoolRecord``: key = run ID, the
    wire bytes, the publisher's headers, the event ID; in each run's sequence order."""
    down = f"127.0.0.1:{closed_port()}"
    result = adapter().run("down", down, "100", "1", str(tmp_path), "-", "runtrail.events")
    assert result["stats"]["spooled"] == PER_RUN
    lines = (tmp_path / "acme" / "runtrail%2Eevents.ai4j.spool").read_bytes().splitlines()
    records = [parse_line(line) for line in lines]
    codec = EventCodec()
    events = [codec.decode(r.value).event for r in records]
    assert [e.sequence for e in events] == list(range(1, PER_RUN + 1))
    for record, event in zip(records, events, strict=True):
        assert record.key == event.run_id.encode() == b"down-0"
        assert record.event_id == event.event_id
        assert dict(record.headers)["rt.type"] == event.type.encode()
