"""A stored projection row as the read commands display it (``projection show`` / ``list``).

One function, so that what a user is shown and what the shadow comparison
(:mod:`runtrail.projection.compare`) checks cannot drift apart: every column shown is compared.
"""

from __future__ import annotations

from typing import Any

from runtrail.projection.store import StoredProjection


def row_json(row: StoredProjection) -> dict[str, Any]:
    """A stored row as JSON: identity, status, halt and the projection itself."""
    c = row.halt_coordinates
    return {
        "tenantId": row.tenant_id,
        "runId": row.run_id,
        "status": row.status,
        "version": str(row.version),
        "projectorVersion": row.projector_version,
        "halted": row.halted,
        "haltReason": row.halt_reason,
        "haltedAt": None
        if c is None
        else {
            "topic": c.topic,
            "partition": c.partition,
            "offset": c.offset,
            "sequence": str(c.sequence),
            "eventId": c.event_id,
            "type": c.event_type,
            "schemaVersion": c.schema_version,
        },
        "projection": row.state.json_form() if row.state is not None else None,
    }
