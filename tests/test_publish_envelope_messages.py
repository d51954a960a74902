"""A malformed ``type`` or ``schemaVersion`` is rejected naming that field and what it holds.

Issue 12 ("what a new user tripped over"): the rejection said "needs a string 'type' and an
integer 'schemaVersion'" even when ``type`` *was* a string, so a user could not tell which
field to fix. Checked in the envelope (every path validates there) and through
``runtrail publish`` against the real broker, where the good lines around them still land.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.events.envelope import Event
from runtrail.events.errors import InvalidEvent
from tests.publisher_support import contents


@pytest.mark.parametrize(
    ("form", "expected"),
    [
        (
            {"type": 7, "schemaVersion": 1},
            "'type' must be a string naming the event type, not int 7",
        ),
        ({"schemaVersion": 1}, "'type' must be a string naming the event type, but it is missing"),
        (
            {"type": "MODEL_REASONING", "schemaVersion": "1"},
            "'schemaVersion' of MODEL_REASONING must be an integer, not str '1'",
        ),
        (
            {"type": "MODEL_REASONING", "schemaVersion": True},
            "'schemaVersion' of MODEL_REASONING must be an integer, not bool True",
        ),
    ],
)
def test_the_envelope_names_the_wrong_field(form: dict[str, Any], expected: str) -> None:
    with pytest.raises(InvalidEvent) as raised:
        Event.model_validate({"runId": "r", "data": {"text": "x"}, **form})
    assert str(raised.value) == expected


@pytest.mark.kafka
def test_publish_names_the_wrong_field(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(1)
    lines = [
        '{"runId": "r", "type": "MODEL_REASONING", "data": {"text": "first"}}',
        '{"runId": "r", "type": 7, "data": {"text": "x"}}',
        '{"runId": "r", "type": "MODEL_REASONING", "schemaVersion": "1", "data": {"text": "x"}}',
        '{"runId": "r", "data": {"text": "x"}}',
        '{"runId": "r", "type": "MODEL_REASONING", "data": {"text": "last"}}',
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [str(Path(sys.executable).with_name("runtrail")), "publish", str(path), "--topic", topic],
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
    assert "sent 2, spooled 0, rejected 3" in done.stdout, (done.stdout, done.stderr)
    reasons = [line for line in done.stderr.splitlines() if line.startswith("line ")]
    assert reasons == [
        "line 2: invalid-payload: 'type' must be a string naming the event type, not int 7",
        "line 3: invalid-payload: 'schemaVersion' of MODEL_REASONING must be an integer,"
        " not str '1'",
        "line 4: invalid-payload: 'type' must be a string naming the event type, but it is missing",
    ], done.stderr
    found = contents(kafka_bootstrap, topic, 2)
    assert [e.data.model_dump()["text"] for e in found.events] == ["first", "last"]
