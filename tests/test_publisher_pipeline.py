"""The publisher's pipeline without Kafka: each step on its own, and together they make the
record the services decode back into the event."""

from __future__ import annotations

from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import EventCodec, EventError
from runtrail.events.limits import EventLimits
from runtrail.publisher.pipeline import Rejected, encode, envelope, prepare, validate
from runtrail.publisher.redaction import default_redactor

LIMITS = EventLimits.from_settings(Settings(max_event_bytes=64 * 1024))


def _form(**data: Any) -> dict[str, Any]:
    return envelope("MODEL_REASONING", "run-1", {"text": "thinking", **data}, tenant_id="acme")


def test_an_event_goes_through_every_step_and_decodes_back() -> None:
    form = prepare(_form(), LIMITS, "acme", default_redactor)
    valid = validate(form)
    assert valid.assign  # it carried no sequence: the publisher numbers it
    record = encode(
        EventCodec(), LIMITS, valid, 7, {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    )
    event = EventCodec().decode(record.value).event
    assert (event.run_id, event.tenant_id, event.sequence, event.type) == (
        "run-1",
        "acme",
        7,
        "MODEL_REASONING",
    )
    assert record.key == b"run-1" and record.sequence == 7 and record.event_id == event.event_id
    assert dict(record.headers)["rt.type"] == b"MODEL_REASONING"


def test_secrets_are_redacted_before_validation() -> None:
    form = prepare(_form(api_key="sk-live-0123456789abcdefXYZ"), LIMITS, "acme", default_redactor)
    assert "sk-live-0123456789abcdefXYZ" not in repr(form)


def test_each_step_refuses_with_a_reason() -> None:
    with pytest.raises(EventError) as unknown:
        envelope("NOT_A_TYPE", "run-1", {}, tenant_id="acme")
    assert unknown.value.reason == "unknown-event-type"
    deep: Any = "x"
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(EventError):  # measured, not recursed into
        prepare(_form(deep=deep), LIMITS, "acme", default_redactor)

    def broken(form: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("boom")

    with pytest.raises(Rejected) as refused:
        prepare(_form(), LIMITS, "acme", broken)
    assert refused.value.reason == "redaction-failed"
    with pytest.raises(EventError):
        validate({**prepare(_form(), LIMITS, "acme", default_redactor), "step": "not a step"})
    big = prepare(
        _form(text="x" * 100_000), EventLimits.from_settings(Settings()), "acme", default_redactor
    )
    with pytest.raises(EventError) as too_large:
        encode(EventCodec(), LIMITS, validate(big), 1, None)
    assert too_large.value.reason == "too-large"
