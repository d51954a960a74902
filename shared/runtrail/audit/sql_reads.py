"""Reads both SQL link stores share: rows back into links and checkpoints.

SQLite and PostgreSQL differ in how they write (locks, COPY, triggers) but not in what a row
means, so the row decoding and the checkpoint queries live once, here; each store names its
parameter placeholder and provides ``_query``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from runtrail.audit.checkpoint import Checkpoint
from runtrail.audit.errors import MalformedLink
from runtrail.audit.link import Link, LinkSummary, RunHead
from runtrail.audit.store import StoredCheckpoint
from runtrail.events.errors import EventError
from runtrail.events.jsonform import loads_strict

_CHECKPOINT_COLUMNS = "SELECT id, body, note, created_at FROM audit_checkpoints"


def link_from_row(row: Sequence[Any], position: int | None = None) -> Link:
    """A stored (index, prevHash, hash, event JSON) row; a row that is not one is malformed.

    ``position`` is the row's place in the chain as read (``load_chain``); the error carries
    it rather than the stored ``idx`` label, which an attacker could have rewritten.
    """
    idx, prev_hash, hash_, text = row
    where = int(idx) if position is None else position
    try:
        event = loads_strict(str(text))
    except (ValueError, EventError) as exc:
        raise MalformedLink(f"stored link {idx}: event is not JSON ({exc})", where) from exc
    if not isinstance(event, dict):
        raise MalformedLink(f"stored link {idx}: event is not a JSON object", where)
    return Link(int(idx), event, str(prev_hash), str(hash_))


#: The envelope fields a summary reads from each stored event (JSON members, in this order).
SUMMARY_FIELDS = (
    "eventId", "type", "sequence", "step", "turnId", "sessionId", "occurredAt", "recordedAt"
)  # fmt: skip


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit():
        return int(value)
    return None


def summary_from_row(row: Sequence[Any]) -> LinkSummary:
    """A (idx, *SUMMARY_FIELDS) row; a member missing or of another type reads as None."""
    idx, event_id, etype, sequence, step, turn, session, occurred, recorded = row
    return LinkSummary(
        index=int(idx),
        event_id=_text(event_id),
        event_type=_text(etype),
        sequence=_int(sequence),
        step=_int(step),
        turn_id=_text(turn),
        session_id=_text(session),
        occurred_at=_text(occurred),
        recorded_at=_text(recorded),
    )


def stored_checkpoint(row: Sequence[Any]) -> StoredCheckpoint:
    checkpoint_id, body, note, created = row
    return StoredCheckpoint(
        int(checkpoint_id), Checkpoint.parse(str(body)), str(note), str(created)
    )


class CheckpointReads:
    """The checkpoint queries of a SQL link store (``PARAM`` is its placeholder)."""

    PARAM: ClassVar[str]

    def _query(self, sql: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def latest_checkpoint(self) -> StoredCheckpoint | None:
        rows = self._query(f"{_CHECKPOINT_COLUMNS} ORDER BY id DESC LIMIT 1")
        return stored_checkpoint(rows[0]) if rows else None

    def get_checkpoint(self, checkpoint_id: int) -> StoredCheckpoint | None:
        rows = self._query(f"{_CHECKPOINT_COLUMNS} WHERE id = {self.PARAM}", (checkpoint_id,))
        return stored_checkpoint(rows[0]) if rows else None

    def find_checkpoint(self, checkpoint: Checkpoint) -> StoredCheckpoint | None:
        rows = self._query(
            f"{_CHECKPOINT_COLUMNS} WHERE body = {self.PARAM} ORDER BY id DESC LIMIT 1",
            (checkpoint.body(),),
        )
        return stored_checkpoint(rows[0]) if rows else None

    def checkpoint_heads(self, checkpoint_id: int) -> list[RunHead]:
        rows = self._query(
            "SELECT tenant_id, run_id, length, hash FROM audit_checkpoint_heads "
            f"WHERE checkpoint_id = {self.PARAM} ORDER BY leaf_index",
            (checkpoint_id,),
        )
        return [RunHead(str(t), str(r), int(n), str(h)) for t, r, n, h in rows]
