"""The mapper's events → the events topic: built as the publisher builds them, sent as services
send their output.

Each event goes through the publisher's pure pipeline (:mod:`runtrail.publisher.pipeline`:
limits, redaction, validation, Avro encoding) with the eventId and sequence the mapper decided,
and is sent through an :class:`~runtrail.kafka.output_topic.OutputTopic`: kept until the broker
acknowledged it, sent again in order after a failure. No spool: the mapper commits the raw
topic only after :meth:`EventRecords.flush` confirmed every event, so what is not on the
events topic yet is mapped again from the raw topic, under the same eventIds and sequences.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from runtrail.config import Settings
from runtrail.events import EventCodec, EventError
from runtrail.events.limits import EventLimits
from runtrail.kafka.output_topic import CLOSE_TIMEOUT_S, OutputTopic
from runtrail.publisher.pipeline import Rejected, encode, prepare, validate
from runtrail.publisher.publisher import Submitted
from runtrail.publisher.redaction import default_redactor


class EventRecords:
    """A :class:`~runtrail.adapters.otel_publish.Submitter` onto the events topic for events
    that carry their eventId and sequence."""

    def __init__(self, settings: Settings) -> None:
        self._tenant = settings.tenant
        self._codec = EventCodec()
        self._limits = EventLimits.from_settings(settings)
        self._topic = OutputTopic(
            settings, settings.events_topic, client_id=f"runtrail-otlp-mapper-{os.getpid()}"
        )

    def submit(self, event: Any, *, trace_context: Mapping[str, str] | None = None) -> Submitted:
        """Send one numbered event (its JSON form); why not, when it is refused."""
        try:
            form = prepare(event, self._limits, self._tenant, default_redactor)
            valid = validate(form)
            record = encode(self._codec, self._limits, valid, valid.event.sequence, trace_context)
        except (EventError, Rejected) as exc:
            return Submitted(None, exc.reason, str(exc))
        self._topic.send(record.key, record.value, list(record.headers))
        return Submitted(valid.event.event_id)

    def flush(self, timeout: float = 10.0) -> int:
        """Every event sent is acknowledged, or :class:`StoreUnavailable` (nothing commits)."""
        self._topic.confirm(timeout)
        return 0

    def poll(self) -> None:
        self._topic.poll()

    def forget_run(self, run_id: str) -> None:
        """Nothing to forget: the mapper numbers runs itself."""

    def close(self) -> None:
        self._topic.close(CLOSE_TIMEOUT_S)
