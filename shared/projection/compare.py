"""Shadow rebuild check: which runs differ between two projection stores (seed 002).

Rebuild the topic into a fresh store with new projector code, then compare it with the live
one before switching: every run present in only one store, or whose state or halt differs, is
reported with the top-level fields (camelCase) that differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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


def _form(row: StoredProjection) -> dict[str, Any]:
    state = row.state.json_form() if row.state is not None else {}
    return {**state, "halted": row.halted, "haltReason": row.halt_reason}


def differing_fields(a: StoredProjection, b: StoredProjection) -> tuple[str, ...]:
    """Top-level fields (camelCase, plus halted/haltReason) whose values differ."""
    fa, fb = _form(a), _form(b)
    return tuple(sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)))


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
