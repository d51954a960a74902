"""What the sessions service does when an erasure is recorded (``run.content_erased``).

Why: the service holds recently active sessions in memory, the erased run's events included.
``runtrail erase`` deletes their stored copies, but the next event of such a session would make
the service save the whole session again (its save finds no stored snapshot and writes all it
holds), pointer included. So on the erasure event the sessions held that applied the erased
run (scope ``run``) or hold a reference sealed by the destroyed key are dropped from memory
unsaved, and their stored copies deleted again: one may have been saved between the erasure's
deletions and this event. A later event of the session starts it afresh, without them.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtrail.events import Event
from runtrail.events.domain_events import ContentErased
from runtrail.privacy.reference import key_marker
from runtrail_services.sessions.tracking import Tracked

SessionKey = tuple[str, str]


def erased_sessions(
    sessions: Iterable[tuple[SessionKey, Tracked]], event: Event
) -> list[SessionKey]:
    """The sessions of ``event``'s tenant an erasure event covers (none for another event)."""
    data = event.data
    if not isinstance(data, ContentErased):
        return []
    runs = (event.run_id,) if data.scope == "run" else ()
    marker = key_marker(data.key_id).encode() if data.key_id else None
    found = []
    for key, tracked in sessions:
        if key[0] != event.tenant_id:
            continue
        session = tracked.session
        if any(run in session.last_applied_sequence for run in runs) or (
            marker is not None and marker in session.snapshot().to_bytes()
        ):
            found.append(key)
    return found
