"""``runtrail publish FILE.jsonl``: counts, per-line reasons, exit status, events on the topic."""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from runtrail.events import EventCodec
from runtrail.publisher import Publisher
from runtrail_tools.cli import publish_cmd
from runtrail_tools.cli.main import main
from tests.fake_producer import FakeProducer
from tests.publisher_support import contents

CODEC = EventCodec()


def good(run: str, text: str, **extra: Any) -> str:
    form = {"runId": run, "type": "MODEL_REASONING", "schemaVersion": 1, "data": {"text": text}}
    return json.dumps({**form, **extra})


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


MIXED = [
    good("run-a", "one"),  # 1
    '{"runId": "run-a", "type": "STEP_END", "type": "MODEL_REASONING", "schemaVersion": 1,'
    ' "data": {"text": "dup"}}',  # 2: duplicate key
    "",  # 3: blank, ignored
    good("run-b", "two", eventId="fixed-id-2", tenantId="t9"),  # 4
    '{"runId": "run-a", "type": "MODEL_RETRY", "schemaVersion": 1, "data": {"attempt": 0}}',  # 5
    "   ",  # 6: blank
    "[1, 2]",  # 7: not an object
    "{not json",  # 8
    good("run-a", "three"),  # 9
]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeProducer:
    """The command's Publisher, with an in-memory producer and a spool under tmp_path."""
    producer = FakeProducer()
    patched = functools.partial(Publisher, producer_factory=lambda config: producer)
    monkeypatch.setattr(publish_cmd, "Publisher", patched)
    monkeypatch.setenv("RUNTRAIL_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("RUNTRAIL_TENANT", "t1")
    return producer


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("line ")]


def test_mixed_file(tmp_path: Path, fake: FakeProducer, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_lines(tmp_path / "events.jsonl", MIXED)
    assert main(["publish", str(path), "--topic", "mine"]) == 1
    out, err = capsys.readouterr()
    assert "sent 3, spooled 0, rejected 4" in out
    reasons = lines_of(err)
    assert [r.split(":")[0] for r in reasons] == ["line 2", "line 5", "line 7", "line 8"]
    assert reasons[0].startswith("line 2: duplicate-json-key: duplicate key 'type'")
    assert reasons[1].startswith("line 5: invalid-payload: ")
    assert reasons[2].startswith("line 7: invalid-event: ")
    assert reasons[3].startswith("line 8: invalid-json: ")
    events = [CODEC.decode(m.value).event for m in fake.log]
    assert {m.topic for m in fake.log} == {"mine"}
    assert [(e.run_id, e.sequence, e.data.model_dump()["text"]) for e in events] == [
        ("run-a", 1, "one"),
        ("run-b", 1, "two"),
        ("run-a", 2, "three"),
    ]
    assert events[1].event_id == "fixed-id-2" and events[1].tenant_id == "t9"
    assert events[0].tenant_id == "t1" and events[0].correlation_id == "run-a"


def test_all_good_exits_zero(tmp_path: Path, fake: FakeProducer, capsys: Any) -> None:
    path = write_lines(tmp_path / "ok.jsonl", [good("r", "a"), "", good("r", "b")])
    assert main(["publish", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip().endswith("sent 2, spooled 0, rejected 0")
    assert lines_of(err) == []


def test_stdin(fake: FakeProducer, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    data = (good("r", "a") + "\n" + '{"runId": 1}' + "\n").encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["publish", "-"]) == 1
    out, err = capsys.readouterr()
    assert "sent 1, spooled 0, rejected 1" in out
    assert lines_of(err)[0].startswith("line 2: ")


def test_invalid_utf8_line(tmp_path: Path, fake: FakeProducer, capsys: Any) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good("r", "a").encode() + b"\n\xff\xfe\n")
    assert main(["publish", str(path)]) == 1
    assert lines_of(capsys.readouterr().err)[0].startswith("line 2: invalid-utf8")


def test_broker_down_reports_spooled(tmp_path: Path, fake: FakeProducer, capsys: Any) -> None:
    fake.mode = "down"
    path = write_lines(tmp_path / "ok.jsonl", [good("r", "a"), good("r", "b")])
    assert main(["publish", str(path), "--timeout", "0.5"]) == 0  # nothing rejected, nothing lost
    out, _ = capsys.readouterr()
    assert "sent 0, spooled 2, rejected 0" in out
    assert any(p.stat().st_size for p in (tmp_path / "spool").rglob("*.seg"))


def test_missing_file(tmp_path: Path, fake: FakeProducer, capsys: Any) -> None:
    assert main(["publish", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.mark.kafka
def test_cli_against_kafka(
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topic_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = kafka_topic_factory(2)
    monkeypatch.setenv("RUNTRAIL_SPOOL_DIR", str(tmp_path / "spool"))
    path = write_lines(tmp_path / "events.jsonl", MIXED)
    status = main(
        [
            "publish",
            str(path),
            "--topic",
            topic,
            "--bootstrap-servers",
            kafka_bootstrap,
            "--tenant",
            "t1",
        ]
    )
    out, err = capsys.readouterr()
    assert status == 1
    assert "sent 3, spooled 0, rejected 4" in out
    assert [r.split(":")[0] for r in lines_of(err)] == ["line 2", "line 5", "line 7", "line 8"]

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while len(messages) < 3 and time.monotonic() < deadline:
            messages += [m for m in consumer.consume(10, 0.5) if m.error() is None]
        messages += [m for m in consumer.consume(10, 1.0) if m.error() is None]
    finally:
        consumer.close()
    events = sorted(
        (CODEC.decode(m.value()).event for m in messages), key=lambda e: (e.run_id, e.sequence)
    )
    assert [(e.run_id, e.sequence, e.data.model_dump()["text"]) for e in events] == [
        ("run-a", 1, "one"),
        ("run-a", 2, "three"),
        ("run-b", 1, "two"),
    ]
    assert {m.key() for m in messages} == {b"run-a", b"run-b"}


def deep_arguments(depth: int) -> str:
    return (
        '{"runId": "run-l", "type": "TOOL_CALL", "data": {"arguments": '
        + "[" * depth
        + "]" * depth
        + "}}"
    )


LIMITS_AND_PAPERCUTS = [
    good("run-l", "first"),  # 1
    '{"runId": "run-l", "type": "TOOL_CALL", "data": {"arguments": {"x": 1e999}}}',  # 2
    deep_arguments(5000),  # 3: deeper than Python's parser goes
    deep_arguments(250),  # 4: deeper than max_json_depth
    '{"runId": "run-l", "type": "NO_SUCH_TYPE", "data": {}}',  # 5
    '{"runId": "run-l", "type": "MODEL_REASONING", "data": {"text": "no version"}}',  # 6
    '{"type": "MODEL_REASONING", "data": {"text": "no run"}}',  # 7
    good("run-l", "last"),  # 8
]


@pytest.mark.kafka
def test_limits_and_papercuts_through_the_cli(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    """Issue 11.4 and 12 ("what a new user tripped over"), as a user runs the command."""
    topic = kafka_topic_factory(1)
    path = write_lines(tmp_path / "events.jsonl", LIMITS_AND_PAPERCUTS)
    runtrail = Path(sys.executable).with_name("runtrail")
    done = subprocess.run(
        [str(runtrail), "publish", str(path), "--topic", topic],
        env={
            **os.environ,
            "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool"),
            "RUNTRAIL_TENANT": "t1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "sent 3, spooled 0, rejected 5" in done.stdout, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    reasons = dict(line.split(": ", 1) for line in lines_of(done.stderr))
    assert list(reasons) == ["line 2", "line 3", "line 4", "line 5", "line 7"], done.stderr
    assert reasons["line 2"].startswith("non-finite: ") and "inf" in reasons["line 2"]
    assert reasons["line 3"].startswith("too-deep: ")
    assert reasons["line 4"].startswith("too-deep: ") and "128" in reasons["line 4"]
    assert reasons["line 5"].startswith("unknown-event-type: unknown event type 'NO_SUCH_TYPE'")
    assert "known types: " in reasons["line 5"] and "MODEL_REASONING" in reasons["line 5"]
    assert reasons["line 7"] == "invalid-payload: runId: Field required"
    assert "correlationId" not in done.stderr  # publish fills it: never reported
    for detail in reasons.values():  # each rejection is printed once, not logged again
        assert done.stderr.count(detail) == 1, done.stderr
    found = contents(kafka_bootstrap, topic, 3)
    assert [(e.data.model_dump()["text"], e.sequence) for e in found.events] == [
        ("first", 1),
        ("no version", 2),
        ("last", 3),
    ]
    assert found.events[1].schema_version == 1  # the current version of MODEL_REASONING
