"""``RUNTRAIL_MAX_JSON_DEPTH`` as users set it: in the environment of a service, which then
dead-letters (``too-deep``) at consume exactly the events nested deeper than it says, on the
compiled path and without it; and in the environment of an agent, whose publisher then refuses
them at publish. (The limit itself, given as an ``EventLimits``: test_decode_walk.py,
test_publisher_limits.py with the default.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.publisher import Publisher
from tests.poison_corpus import dead_letters_by_offset, raw_encode
from tests.support import (
    ServiceProcess,
    consume_all,
    create_topic,
    end_offsets,
    form,
    produce,
    read_lines,
    unique_topic,
    wait_for,
)


def _raw_nested(depth: int) -> str:
    """A JSON text whose arrays are nested ``depth`` deep."""
    return "[" * depth + "]" * depth


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("native", ["auto", "off"])
def test_a_service_dead_letters_by_the_depth_its_environment_sets(
    kafka_bootstrap: str, tmp_path: Path, native: str
) -> None:
    """With ``RUNTRAIL_MAX_JSON_DEPTH=200`` an event nested 150 deep (over the default 128) is
    processed and one nested 240 deep is dead-lettered too-deep. If the service ignored the
    variable (or a consume path kept the default), the 150-deep event would be dead-lettered:
    an event the operator allowed, lost to the service."""
    topic = create_topic(kafka_bootstrap, unique_topic("depth"), partitions=1)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    # in this order on one partition: the shallow canary last, so once it is processed the
    # service has decided the other two
    depths = {"allowed": 150, "too-deep": 240, "shallow": 3}
    forms = {name: form("MODEL_RESPONSE", run_id=f"run-{name}") for name in depths}
    produce(
        kafka_bootstrap,
        topic,
        (
            (f["runId"], raw_encode(f, {"raw": _raw_nested(depths[name])}))
            for name, f in forms.items()
        ),
    )
    out = tmp_path / "noop.out"
    proc = ServiceProcess(
        "noop",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={"output": str(out)},
        env={"RUNTRAIL_MAX_JSON_DEPTH": "200", "RUNTRAIL_NATIVE": native},
        log_path=tmp_path / "noop.log",
    )
    canary = forms["shallow"]["eventId"]
    try:
        wait_for(
            lambda: any(line.startswith(canary) for line in read_lines(out)),
            30,
            what="the last event processed",
        )
        assert proc.terminate() == 0  # its dead letters flushed
    finally:
        proc.close()
    processed = {line.split(" ")[0] for line in read_lines(out)}
    assert processed == {forms["allowed"]["eventId"], canary}
    assert end_offsets(kafka_bootstrap, f"{topic}.dlq", 1) == {0: 1}
    dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=1, timeout=30)
    assert dead_letters_by_offset(dead, "noop") == {1: "too-deep"}


def test_a_publisher_refuses_by_the_depth_its_environment_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent run with ``RUNTRAIL_MAX_JSON_DEPTH=8`` has its publisher refuse data nested 10
    deep (too-deep, naming the limit 8) and accept data nested 6 deep. Ignored, the publisher
    would take the deep event under the default 128 and send it on to services that refuse it."""
    monkeypatch.setenv("RUNTRAIL_MAX_JSON_DEPTH", "8")
    settings = Settings(
        bootstrap_servers="127.0.0.1:1",  # nothing is sent: limits are checked at publish
        spool_dir=tmp_path / "spool",
        tenant="t1",
        events_topic="events",
    )
    with Publisher(settings) as pub:
        deep = pub.submit({"runId": "r", "type": "TOOL_CALL", "data": {"arguments": _nested(10)}})
        ok = pub.submit({"runId": "r", "type": "TOOL_CALL", "data": {"arguments": _nested(6)}})
        rejected = pub.stats().rejected
        pub.close(timeout=1)
    assert (deep.accepted, deep.reason) == (False, "too-deep"), deep
    assert "8 levels" in str(deep.detail), deep.detail
    assert ok.accepted, ok
    assert rejected == 1
