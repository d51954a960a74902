"""The dead-letter detail says what is wrong with a value's header: truncated (empty, shorter
than the 10-byte header) is not the same fault as bytes without the C3 01 marker (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.events import EventCodec
from runtrail.events.codec import header_problem
from runtrail.events.errors import UndecodableEvent
from runtrail.runtime.deadletter import H_DETAIL, H_OFFSET, H_REASON
from tests.support import consume_all, encode, form, produce, wait_for
from tests.test_runtime_kafka import start, topic  # noqa: F401  (the fixture)

CASES = [
    (b"\xc3\x01", "truncated: 2 byte(s), shorter than the 10-byte header"),
    (b"\xc3", "truncated: 1 byte(s), shorter than the 10-byte header"),
    (b"\xc3\x01\x00\x00\x00", "truncated: 5 byte(s), shorter than the 10-byte header"),
    (b"", "truncated: empty value (0 bytes)"),
    (b'{"type": "MODEL_RESPONSE"}', "no C3 01 marker (starts with 7b 22, 26 bytes)"),
    (b"ab", "no C3 01 marker (starts with 61 62, 2 bytes)"),
]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_the_decoder_says_truncated_or_no_marker(value: bytes, expected: str) -> None:
    assert expected in header_problem(value)
    with pytest.raises(UndecodableEvent, match=expected.replace("(", r"\(").replace(")", r"\)")):
        EventCodec().decode(value)
    if expected.startswith("truncated"):
        assert "marker" not in header_problem(value).split("(")[0]


def test_a_null_value_is_named_as_such() -> None:
    assert "null message" in header_problem(None)


@pytest.mark.kafka
def test_dead_letter_detail_of_a_truncated_value(
    kafka_bootstrap: str,
    topic: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    values = [v for v, _ in CASES]
    after = encode(form(run_id="run-t", sequence=1))
    produce(kafka_bootstrap, topic, [("run-t", v) for v in values] + [("run-t", after)])
    gen = start(kafka_bootstrap, topic)
    running = next(gen)
    wait_for(lambda: len(running.service.seen) == 1, 60, what="the event after them")
    try:
        dead = consume_all(kafka_bootstrap, f"{topic}.dlq", expect=len(CASES))
        assert len(dead) == len(CASES)
        by_offset = sorted(dead, key=lambda m: int(dict(m.headers())[H_OFFSET]))
        for msg, (_, expected) in zip(by_offset, CASES, strict=True):
            headers = dict(msg.headers())
            assert headers[H_REASON] == b"undecodable"
            assert expected in headers[H_DETAIL].decode()
    finally:
        with pytest.raises(StopIteration):
            next(gen)
