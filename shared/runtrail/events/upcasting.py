"""Upcasters: lift an old event version to the current one, one step at a time.

An upcaster transforms representation only; it never invents a decision (seed 002). Each
step maps the JSON-form payload of version n to version n+1. The chain for a type must be
complete from every retained version to the current one: :func:`check_chains` proves it and
runs at import of the codec, so a missing step fails loudly at start-up, not on a live event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtrail.events.errors import UnknownEventType
from runtrail.events.models import CURRENT_VERSIONS, DATA_MODELS

JsonDict = dict[str, Any]
Step = Callable[[JsonDict], JsonDict]

#: (event type, from version) -> step producing the payload of from version + 1.
UPCASTERS: dict[tuple[str, int], Step] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Step], Step]:
    """Register ``fn`` as the step from ``from_version`` to ``from_version + 1``."""

    def register(fn: Step) -> Step:
        key = (event_type, from_version)
        if key in UPCASTERS:
            raise TypeError(f"two upcasters for {key}")
        UPCASTERS[key] = fn
        return fn

    return register


def adds_null(*fields: str) -> Step:
    """The step of a version that only added ``fields``: the older writer never said them, so
    the honest value of each is null (nothing is derived, nothing decided)."""

    def step(data: JsonDict) -> JsonDict:
        return {**data, **dict.fromkeys(fields)}

    return step


#: (event type, from version) -> the fields its next version added. Each is null when lifted:
#: v1 approvals never expired (``expiresAt``); v1 questions and answers came by reference only
#: (``prompt``, ``input``); a v1 retry never said its budget (``maxAttempts``), a v1 call its
#: ``type`` (its ``arguments`` stay as written). A v1 tool result said none of ``ok``,
#: ``failed``, ``trace``: ``failed`` is not derived from ``error``, v1's failure rule (``error``
#: set) stays the reader's rule for a null ``failed`` (``ToolResult.is_failure``).
ADDED_FIELDS: dict[tuple[str, int], tuple[str, ...]] = {
    ("run.approval_required", 1): ("expiresAt",),
    ("run.input_required", 1): ("prompt",),
    ("run.input_received", 1): ("input",),
    ("MODEL_RETRY", 1): ("maxAttempts",),
    ("TOOL_CALL", 1): ("type",),
    ("TOOL_RESULT", 1): ("ok", "failed", "trace"),
}
for (_type, _version), _fields in ADDED_FIELDS.items():
    upcaster(_type, _version)(adds_null(*_fields))


def upcast(event: JsonDict) -> JsonDict:
    """The JSON form of ``event`` lifted to its type's current version (a new dict if changed)."""
    event_type = event["type"]
    version = event["schemaVersion"]
    current = CURRENT_VERSIONS.get(event_type)
    if current is None or version > current:
        raise UnknownEventType(
            f"event type {event_type!r} v{version}: "
            + ("unknown type" if current is None else f"newer than this code (current v{current})")
        )
    if version == current:
        return event
    data = event["data"]
    while version < current:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise UnknownEventType(f"no upcaster for {event_type!r} v{version} -> v{version + 1}")
        data = step(data)
        version += 1
    return {**event, "schemaVersion": version, "data": data}


def data_lift(event_type: str, version: int) -> Step:
    """The upcasters' steps from ``version`` to the current one, as one function of ``data``
    (what :func:`upcast` does to the payload; the compiled path calls it)."""
    steps = []
    current = CURRENT_VERSIONS[event_type]
    while version < current:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise UnknownEventType(f"no upcaster for {event_type!r} v{version} -> v{version + 1}")
        steps.append(step)
        version += 1

    def lift(data: JsonDict) -> JsonDict:
        for step in steps:
            data = step(data)
        return data

    return lift


def check_chains() -> None:
    """Every retained old version must reach the current one through registered steps."""
    for event_type, version in DATA_MODELS:
        current = CURRENT_VERSIONS[event_type]
        for v in range(version, current):
            if (event_type, v) not in UPCASTERS:
                raise RuntimeError(f"{event_type} v{v} is retained but has no upcaster to v{v + 1}")
