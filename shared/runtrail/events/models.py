"""The event model with every payload type registered: read the registries from here.

Subclassing :class:`~runtrail.events.envelope.EventData` registers a payload, so the registries
of :mod:`runtrail.events.envelope` are whole only once every payload module is imported. This
module imports them all, then gives the envelope's names: whoever reads a registry, or
validates an :class:`Event` (which picks its class from one), imports it from here or from the
package, never from the envelope alone (``tests/test_startup_imports.py`` holds the code to it).
"""

from __future__ import annotations

from runtrail.events import domain_events, runtime_events  # noqa: F401  (registers every payload)
from runtrail.events.envelope import (
    CURRENT_VERSIONS,
    DATA_MODELS,
    EVENT_CLASSES,
    Actor,
    Event,
    EventData,
    data_model,
)

__all__ = [
    "CURRENT_VERSIONS",
    "DATA_MODELS",
    "EVENT_CLASSES",
    "Actor",
    "Event",
    "EventData",
    "data_model",
]
