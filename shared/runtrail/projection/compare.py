"""Shadow rebuild check: which runs differ between two projection stores (seed 002).

Rebuild the topic into a fresh store with new projector code, then compare it with the live
one before switching: every run present in only one store, or that differs in anything the
read commands display, is reported with the fields (camelCase) that differ. The compared form
is :func:`~runtrail.projection.display.row_json`, the very JSON ``projection show`` prints:
its columns (``status``, ``version``, ``projectorVersion``, ``halted``, ``haltReason``,
``haltedAt``) and each top-level field of the state. A column and the state field of the same
name (``status``, ``version``) are one field: it differs if either does, so an edited column
(``UPDATE projections SET status = 'failed'``) is reported although the state JSON is intact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runtrail.projection.display import row_json
from runtrail.projection.store import ProjectionStore, StoredProjection

DifferenceKind = Literal["only_in_a", "only_in_b", "differs"]


@dataclass(frozen=True, slots=True)
class ProjectionDifference:
    """One run whose projection is not the same in both stores."""

    tenant_id: str
    run_id: str
    kind: DifferenceKind
    fields: tuple[str, ...] = ()
    a_version: int | None = None
    b_version: int | None = None

    def describe(self) -> str:
        run = f"{self.tenant_id}/{self.run_id}"
        if self.kind == "only_in_a":
            return f"{run}: only in A (version {self.a_version})"
        if self.kind == "only_in_b":
            return f"{run}: only in B (version {self.b_version})"
        return (
            f"{run}: differs in {', '.join(self.fields)} "
            f"(version {self.a_version} vs {self.b_version})"
        )


_ABSENT = object()
#: Where the halting event sits in the topic it was read from (``haltedAt``).
_POSITION = ("topic", "partition", "offset")


def _form(row: StoredProjection, *, position: bool) -> dict[str, tuple[Any, Any]]:
    """Field name -> (column as displayed, state field): every value a reader is shown."""
    shown = row_json(row)
    state = shown.pop("projection") or {}
    halted_at = shown["haltedAt"]
    if halted_at is not None and not position:
        shown["haltedAt"] = {k: v for k, v in halted_at.items() if k not in _POSITION}
    return {
        name: (shown.get(name, _ABSENT), state.get(name, _ABSENT))
        for name in shown.keys() | state.keys()
    }


def _topic_of(row: StoredProjection) -> str | None:
    return row.halt_coordinates.topic if row.halt_coordinates is not None else None


def differing_fields(a: StoredProjection, b: StoredProjection) -> tuple[str, ...]:
    """The displayed fields (columns and top-level state fields, camelCase) that differ.

    The halting event's position (topic, partition, offset) is compared when both rows name
    the same topic; a store rebuilt from another topic (a migrated copy) holds the same event
    at another position, which is not a difference in the projection.
    """
    position = _topic_of(a) == _topic_of(b)
    fa, fb = _form(a, position=position), _form(b, position=position)
    missing = (_ABSENT, _ABSENT)
    return tuple(
        sorted(k for k in fa.keys() | fb.keys() if fa.get(k, missing) != fb.get(k, missing))
    )


def compare_projections(
    a_store: ProjectionStore, b_store: ProjectionStore, *, tenant: str | None = None
) -> list[ProjectionDifference]:
    """Every run whose projection differs between the stores, ordered by (tenant, run)."""
    a_rows = {(r.tenant_id, r.run_id): r for r in a_store.list(tenant=tenant)}
    b_rows = {(r.tenant_id, r.run_id): r for r in b_store.list(tenant=tenant)}
    out: list[ProjectionDifference] = []
    for key in sorted(a_rows.keys() | b_rows.keys()):
        a, b = a_rows.get(key), b_rows.get(key)
        if b is None:
            assert a is not None
            out.append(ProjectionDifference(*key, "only_in_a", a_version=a.version))
        elif a is None:
            out.append(ProjectionDifference(*key, "only_in_b", b_version=b.version))
        else:
            fields = differing_fields(a, b)
            if fields:
                out.append(ProjectionDifference(*key, "differs", fields, a.version, b.version))
    return out
