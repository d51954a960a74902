"""What the compacted sessions topic carries: the latest snapshot of each session, or where
to find it.

Key: tenant and session (:func:`~runtrail.sessions.naming.session_key`), so compaction keeps
one message per session. Value: a JSON :class:`SessionPointer` with the snapshot inline when
it is small, else its object-storage reference and digest. A deleted session is a tombstone
(null value). ``revision`` lets a reader that sees two pointers keep the newer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail.sessions.errors import CorruptSnapshot
from runtrail.sessions.naming import session_key
from runtrail.sessions.snapshot import AgentSessionSnapshot, parse_snapshot


class SessionPointer(BaseModel):
    """The latest saved snapshot of one session, as published on the sessions topic."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    tenant_id: str
    session_id: str
    revision: Annotated[int, Field(ge=0)]
    digest: str
    code_version: str
    last_applied_sequence: dict[str, int]
    size: Annotated[int, Field(ge=0)]
    snapshot_ref: str | None = None
    snapshot: Any = None

    @property
    def key(self) -> bytes:
        return session_key(self.tenant_id, self.session_id).encode()

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json", by_alias=True))

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionPointer:
        return cls.model_validate_json(data)

    def resolve(self, blobs: SnapshotBlobStore | None = None) -> AgentSessionSnapshot:
        """The snapshot this pointer names, verified against its digest."""
        where = f"in the sessions-topic pointer of {self.tenant_id}/{self.session_id}"
        if self.snapshot_ref is not None:
            if blobs is None:
                raise ValueError(f"{self.snapshot_ref} is by reference: a blob store is needed")
            return blobs.get(self.snapshot_ref, self.digest)
        snapshot = parse_snapshot(orjson.dumps(self.snapshot), where)
        if snapshot.digest != self.digest:
            raise CorruptSnapshot(where, f"is {snapshot.digest}, the pointer says {self.digest}")
        return snapshot


@dataclass(frozen=True, slots=True)
class PointerMessage:
    """One message for the sessions topic: its key, its value, and how it carries the snapshot."""

    key: bytes
    value: bytes
    by_reference: bool


def pointer_message(
    snapshot: AgentSessionSnapshot,
    data: bytes,
    *,
    inline_limit: int,
    blobs: SnapshotBlobStore | None,
) -> PointerMessage:
    """The pointer to ``snapshot`` (whose stored form is ``data``): inline if ``data`` fits
    ``inline_limit``, else uploaded to ``blobs`` and referenced.

    Inline, ``data`` is spliced in as it is: it is JSON already (the snapshot's canonical form),
    so it is neither parsed nor copied; a reader gets the same :class:`SessionPointer`."""
    pointer = SessionPointer(
        tenant_id=snapshot.tenant_id,
        session_id=snapshot.session_id,
        revision=snapshot.revision,
        digest=snapshot.digest,
        code_version=snapshot.code_version,
        last_applied_sequence=snapshot.last_applied_sequence,
        size=len(data),
    )
    if len(data) <= inline_limit or blobs is None:
        if len(data) > inline_limit:
            raise ValueError(
                f"snapshot of {snapshot.tenant_id}/{snapshot.session_id} is {len(data)} bytes, "
                f"over the inline limit {inline_limit}, and no blob store is configured"
            )
        head = orjson.dumps(pointer.model_dump(mode="json", by_alias=True, exclude={"snapshot"}))
        return PointerMessage(pointer.key, head[:-1] + b',"snapshot":' + data + b"}", False)
    referenced = pointer.model_copy(update={"snapshot_ref": blobs.put(snapshot, data)})
    return PointerMessage(pointer.key, referenced.to_bytes(), True)
