"""What the publisher does to an event before Kafka: build, prepare, validate, encode.

Pure: no Kafka, no threads, no state but what is passed in, so each step is tested on its own
(``tests/test_publisher_pipeline.py``). The publisher runs them in this order and only the last
(:func:`encode`) under its lock, because the sequence number it writes is taken there:

1. :func:`envelope` — the event ``publish(type, run_id, data, …)`` describes, as a JSON form;
2. :func:`prepare` — envelope defaults filled, size and depth limits checked (a value nested
   5,000 deep is measured, not recursed into), the type and version checked, secrets redacted;
3. :func:`validate` — the pydantic models (the exact fast path, else the lax one, which says
   what is wrong);
4. :func:`encode` — the Avro single-object bytes and the Kafka headers, within the size limit.

A step that refuses an event raises :class:`~runtrail.events.EventError` or
:class:`Rejected`, each with a reason the publisher counts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from runtrail.events import (
    CURRENT_VERSIONS,
    Actor,
    Event,
    EventCodec,
    EventData,
    InvalidEvent,
    UnknownEventType,
    validate_json_form,
)
from runtrail.events.codec import validate_exact
from runtrail.events.limits import EventLimits
from runtrail.publisher.envelope_defaults import (
    DEFAULT_ACTOR,
    fill_defaults,
    new_event_id,
    utc_now_iso,
)
from runtrail.publisher.headers import event_headers
from runtrail.publisher.redaction import (
    Redactor,
    SecretInIdentifier,
    default_redactor,
    json_text,
    redact_scanned,
)
from runtrail.publisher.spool_record import SpoolRecord

JsonDict = dict[str, Any]


class Rejected(Exception):
    """An event refused for a reason that is no schema error (redaction, the producer)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def known_types() -> str:
    return ", ".join(sorted(CURRENT_VERSIONS))


def envelope(
    event_type: str,
    run_id: str,
    data: Mapping[str, Any] | EventData,
    *,
    tenant_id: str,
    session_id: str | None = None,
    turn_id: str | None = None,
    step: int | None = None,
    actor: Actor | Mapping[str, str] | None = None,
    causation_event_id: str | None = None,
    correlation_id: str | None = None,
    schema_version: int | None = None,
) -> JsonDict:
    """The JSON form of a new event around ``data`` (a fresh eventId, the current version of
    its type unless ``schema_version`` says otherwise)."""
    version = schema_version if schema_version is not None else CURRENT_VERSIONS.get(event_type)
    if version is None:
        raise UnknownEventType(f"unknown event type {event_type!r}; known types: {known_types()}")
    if isinstance(data, EventData):
        payload: Any = data.model_dump(mode="json", by_alias=True)
    else:
        payload = dict(data)
    if isinstance(actor, Actor):
        who: Any = actor.model_dump(mode="json", by_alias=True)
    else:
        who = dict(actor) if actor is not None else dict(DEFAULT_ACTOR)
    return {
        "eventId": new_event_id(),
        "runId": run_id,
        "tenantId": tenant_id,
        "type": event_type,
        "schemaVersion": version,
        "occurredAt": utc_now_iso(),
        "actor": who,
        "causationEventId": causation_event_id,
        "correlationId": correlation_id if correlation_id is not None else run_id,
        "sessionId": session_id,
        "turnId": turn_id,
        "step": step,
        "data": payload,
    }


def prepare(
    event: Event | Mapping[str, Any], limits: EventLimits, tenant: str, redactor: Redactor
) -> JsonDict:
    """The checked, redacted JSON form with envelope defaults filled in.

    The defaults are filled before the limits are checked and the form's JSON text is made
    for the default redactor's prefilter (a shallow copy and a few lookups, safe on any
    value), so the text the prefilter scans is the form it clears."""
    if isinstance(event, Event):
        form = event.json_form()
    elif isinstance(event, Mapping):
        form = dict(event)
    else:
        raise InvalidEvent(f"expected an Event or a JSON-form object, got {type(event).__name__}")
    event_type = form.get("type")
    current = CURRENT_VERSIONS.get(event_type) if isinstance(event_type, str) else None
    if current is not None and form.get("schemaVersion") is None:
        form["schemaVersion"] = current  # writers that do not know ours
    form = fill_defaults(form, tenant)
    # first: a value nested 5,000 deep must be measured here, not recursed into below
    limits.check_form(form)
    if isinstance(event_type, str) and current is None:
        raise UnknownEventType(f"unknown event type {event_type!r}; known types: {known_types()}")
    if form.get("runId") is None:
        raise InvalidEvent("runId: Field required")
    try:
        redacted = (
            redact_scanned(form, json_text(form))
            if redactor is default_redactor
            else redactor(form)
        )
    except SecretInIdentifier as exc:  # its message names the field, never the value
        raise Rejected("secret-in-identifier", str(exc)) from exc
    except Exception as exc:
        raise Rejected("redaction-failed", f"the redactor raised {type(exc).__name__}") from exc
    if not isinstance(redacted, dict):
        raise Rejected("redaction-failed", "the redactor did not return a dict")
    return redacted


class Validated(NamedTuple):
    """An event the models accepted: ``exact`` is the record of the fast path, encoded as it
    is; ``assign``: the publisher numbers it (it carried no sequence). A named tuple, made
    once per event: a frozen dataclass's ``__init__`` costs several times more."""

    event: Event
    exact: JsonDict | None
    assign: bool


def validate(form: JsonDict) -> Validated:
    """Validate a prepared form (a placeholder sequence stands in for one still to assign)."""
    assign = form.get("sequence") is None
    if assign:
        form["sequence"] = "1"  # placeholder: the real number is taken at encoding
    exact = validate_exact(form)
    if exact is None:  # coerced, or invalid: the lax validation says which, and why
        return Validated(validate_json_form(form), None, assign)
    return Validated(exact[0], exact[1], assign)


def encode(
    codec: EventCodec,
    limits: EventLimits,
    valid: Validated,
    sequence: int,
    trace_context: Mapping[str, str] | None,
) -> SpoolRecord:
    """The Kafka record of ``valid`` numbered ``sequence``, within the size limit."""
    event, exact = valid.event, valid.exact
    wire = exact if exact is not None else event.json_form()
    value = None
    if exact is not None:
        exact["sequence"] = sequence
        value = codec.encode_exact(exact)
        if value is None:  # a JSON value orjson would convert its own way
            wire = event.json_form()
    if value is None:
        wire["sequence"] = str(sequence)
        value = codec.encode_json_form(wire)
    limits.check_size(len(value))
    # positional, in the fields' order: a named tuple's keywords cost twice as much, per event
    return SpoolRecord(
        event.run_id.encode("utf-8"),  # key
        value,
        event_headers(wire, trace_context),
        event.event_id,
        time.time_ns() // 1_000_000,  # timestamp_ms
        sequence,
    )
