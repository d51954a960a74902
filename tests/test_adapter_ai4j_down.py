"""With no broker, the ai4j adapter never takes the agent down, and counts every event it loses.

A real ai4j agent runs against a bootstrap address nothing listens on, with a small queue and a
2 s delivery timeout (``Driver down``): the agent completes its run, nothing is thrown into it,
and each of its events is accounted for: skipped (no runtrail type), dropped (queue full) or
accepted and then failed (not delivered in time), with the reason logged and kept as
``lastError``.
"""

from __future__ import annotations

import socket

from tests.ai4j_adapter import adapter


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_broker_no_harm_every_event_counted() -> None:
    result = adapter().run("down", f"127.0.0.1:{closed_port()}", "3", "1")
    stats = result["stats"]
    assert result["events"] == 21  # the agent ran to the end: every event of the run
    assert result["flushed"] is True
    skipped = stats["skipped.STEP_START"] + stats["skipped.FINAL_OUTPUT"]
    assert stats["published"] == 0 and stats["inFlight"] == 0
    assert stats["dropped"] > 0 and stats["failed"] == stats["accepted"] > 0
    assert stats["accepted"] + stats["dropped"] + skipped == result["events"]
    assert "TimeoutException" in stats["lastError"]
