"""One row of the projector's transition table: payload model, allowed statuses, handler.

A handler is pure: it reads the current state, the event and its validated payload, and
returns only the fields it changes (an ``Update``). It raises :class:`InvalidTransition` when
the event cannot follow the state. Bookkeeping common to every event (version, last event id,
turn and step, gaps) is done once by the projector, not by each handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from runtrail.events import Event, EventData
from runtrail.events.upcasting import upcast
from runtrail.instants import utc_instant
from runtrail.projection.errors import InvalidEventData, InvalidTransition
from runtrail.projection.model import RunProjection, RunStatus

D = TypeVar("D", bound=EventData)

#: The fields a handler changes: RunProjection field name -> new value.
Update = dict[str, Any]

#: What a rule allowed in :data:`~runtrail.projection.model.ACTIVE` or ``LIVE`` needs, as a
#: rejection says it.
ACTIVE_NEEDS = "an active status (received, planning, executing, reconciling)"
LIVE_NEEDS = "a run that has not ended"


@dataclass(frozen=True, slots=True)
class Rule(Generic[D]):
    """How one (type, version) applies."""

    model: type[D]
    handler: Callable[[RunProjection, Event, D], Update]
    #: Statuses the event may apply in; any other status rejects it.
    allowed: frozenset[RunStatus]
    #: What the allowed statuses mean, for the rejection message.
    needs: str


def instant(event: Event, name: str, text: str) -> datetime:
    """An ISO-8601 timestamp from an event (naive means UTC); parsing only, never the clock."""
    value = utc_instant(text)
    if value is None:
        raise InvalidTransition(f"{name} is not an ISO-8601 timestamp: {text!r}", event=event)
    return value


def as_current(model: type[D], event: Event) -> D:
    """A retained version's payload as the current ``model``, through the same upcaster as
    the codec: an old event applies by the current rule, never by a rule of its own."""
    try:
        return model.model_validate(upcast(event.json_form())["data"])
    except ValueError as exc:
        raise InvalidEventData(f"v1 payload does not upcast to v2: {exc}", event=event) from None
