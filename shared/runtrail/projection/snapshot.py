"""Projection snapshots: a cache of a run's state, trusted only if written by this projector.

A snapshot holds the state, the last applied sequence and :data:`PROJECTOR_VERSION`. Seed 002:
"Snapshots are caches … verify them before use". :func:`from_snapshot` refuses one from another
projector version (or whose sequence disagrees with its state); the caller rebuilds from events.

Like a session snapshot, a stored projection snapshot is sealed by a content digest:
:meth:`ProjectionSnapshot.sealed` is the stored text ``{"digest", "state"}``, where ``digest`` is
``sha256:<hex>`` of the RFC 8785 bytes of ``{"lastAppliedSequence", "projectorVersion",
"state"}``; :func:`open_sealed` recomputes it, so an edited snapshot (even one that keeps the
projector version and sequence) is refused with :class:`SnapshotMismatch` and a reason.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import ValidationError

from runtrail.events import EventError, canonical_bytes
from runtrail.projection.errors import SnapshotMismatch
from runtrail.projection.model import Frozen, RunProjection, SeqNo
from runtrail.projection.projector import PROJECTOR_VERSION

DIGEST_PREFIX = "sha256:"


class ProjectionSnapshot(Frozen):
    """A run's projection as of ``last_applied_sequence``, stamped with the projector version."""

    projector_version: int
    last_applied_sequence: SeqNo
    state: RunProjection

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ProjectionSnapshot:
        return cls.model_validate_json(text)

    def digest(self) -> str:
        """``sha256:<hex>`` over the version, the sequence and the state (canonical bytes)."""
        return _digest(self.projector_version, self.last_applied_sequence, self.state.json_form())

    def sealed(self) -> str:
        """The stored text: the state and the digest that seals it with version and sequence."""
        state = self.state.json_form()
        digest = _digest(self.projector_version, self.last_applied_sequence, state)
        return canonical_bytes({"digest": digest, "state": state}).decode()


def _digest(projector_version: int, sequence: int, state: dict[str, Any]) -> str:
    content = {
        "lastAppliedSequence": str(sequence),
        "projectorVersion": projector_version,
        "state": state,
    }
    return DIGEST_PREFIX + hashlib.sha256(canonical_bytes(content)).hexdigest()


def open_sealed(
    tenant_id: str, run_id: str, projector_version: int, sequence: int, text: str | bytes
) -> ProjectionSnapshot:
    """A stored snapshot, verified (digest, projector version, sequence): the one way a stored
    snapshot is read. :class:`SnapshotMismatch` says why it is refused."""
    where = f"snapshot of {tenant_id}/{run_id}"
    if projector_version != PROJECTOR_VERSION:
        raise SnapshotMismatch(
            f"{where} was written by projector v{projector_version}, this is "
            f"v{PROJECTOR_VERSION}: rebuild from events"
        )
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SnapshotMismatch(f"{where} is unreadable: {exc}") from None
    if not isinstance(document, dict) or set(document) != {"digest", "state"}:
        raise SnapshotMismatch(f"{where} carries no digest (not sealed): it cannot be verified")
    state = document["state"]
    try:
        actual = _digest(int(projector_version), int(sequence), state)
    except (EventError, TypeError, ValueError) as exc:
        raise SnapshotMismatch(f"{where} cannot be canonicalised: {exc}") from None
    if actual != document["digest"]:
        raise SnapshotMismatch(
            f"{where}: digest mismatch (stored {document['digest']}, content {actual}): "
            "it was edited after it was written"
        )
    try:
        snapshot = ProjectionSnapshot(
            projector_version=int(projector_version),
            last_applied_sequence=int(sequence),
            state=RunProjection.model_validate(state),
        )
    except ValidationError as exc:
        raise SnapshotMismatch(f"{where} is unreadable: {exc}") from None
    if (snapshot.state.tenant_id, snapshot.state.run_id) != (tenant_id, run_id):
        raise SnapshotMismatch(f"{where} holds {snapshot.state.tenant_id}/{snapshot.state.run_id}")
    from_snapshot(snapshot)
    return snapshot


def take_snapshot(state: RunProjection) -> ProjectionSnapshot:
    """A snapshot of ``state`` by the running projector."""
    return ProjectionSnapshot(
        projector_version=PROJECTOR_VERSION, last_applied_sequence=state.version, state=state
    )


def from_snapshot(snapshot: ProjectionSnapshot) -> RunProjection:
    """The snapshot's state, or :class:`SnapshotMismatch` if it cannot be trusted."""
    if snapshot.projector_version != PROJECTOR_VERSION:
        raise SnapshotMismatch(
            f"snapshot of {snapshot.state.tenant_id}/{snapshot.state.run_id} was written by "
            f"projector v{snapshot.projector_version}, this is v{PROJECTOR_VERSION}: "
            "rebuild from events"
        )
    if snapshot.last_applied_sequence != snapshot.state.version:
        raise SnapshotMismatch(
            f"snapshot says sequence {snapshot.last_applied_sequence} but its state is at "
            f"{snapshot.state.version}"
        )
    return snapshot.state
