"""The capture service counts what formed no record, and uses the reorder settings."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.runtime import ServiceContext
from runtrail_services.capture.service import CaptureService
from tests.capture_support import RunEvents, prompt
from tests.checkpoint_support import held
from tests.test_capture_service import TOPIC, deliver, memory, sample


def test_dropped_model_events_are_counted_by_reason_and_logged(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state", reorder_window=0),
        options={"sink_url": "memory://"},
        registry=CollectorRegistry(),
    )
    service = CaptureService(context)
    run = RunEvents()
    events = [
        run.response("orphan", {"id": 1}),  # no MODEL_REQUEST in its step
        run.request(prompt()),
        run.response("ok"),
        run.step_end(),
        run.response("after the end"),
    ]
    with caplog.at_level("INFO"):
        service.process(deliver(events))
        service.process(deliver([events[2]], start=5))  # a redelivered sequence
    assert [r.output_text for r in memory(service).records()] == ["ok"]
    reasons = {"no-open-request": 2.0, "duplicate": 1.0}
    for reason, count in reasons.items():
        assert sample(service, "runtrail_capture_dropped_events_total", reason=reason) == count
    assert "events in no record" in caplog.text


def test_a_gap_is_given_up_after_the_configured_window(tmp_path: Path) -> None:
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state", reorder_window=2),
        options={"sink_url": "memory://"},
        registry=CollectorRegistry(),
    )
    service = CaptureService(context)
    run = RunEvents()
    events = [run.request(prompt()), run.response("a"), run.response("b"), run.step_end()]
    service.process(deliver([events[0], events[2]]))
    assert held(service) == {(TOPIC, 0): 0}
    service.tick(0)
    assert sample(service, "runtrail_capture_buffered_events") == 1
    service.process(deliver([events[3]], start=2))
    service.process(deliver([RunEvents("other").request(prompt())], start=3))
    [record] = memory(service).records()
    assert (record.output_text, record.incomplete_reason) == ("b", "sequence-gap")
    assert sample(service, "runtrail_capture_incomplete_total", node_type="MODEL") == 1
