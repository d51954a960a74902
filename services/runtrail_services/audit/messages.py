"""What the audit topic carries: sealed links and signed checkpoints, as JSON.

* **A link** — key: the run ID; value: the link's export line (RFC 8785 of ``{event, hash,
  index, prevHash, runId, tenantId}``, docs/AUDIT_FORMAT.md §3), so a downstream verifier can
  append the values of one run to a file and check it with ``tools/verify_audit_export.py``.
  Delivery is at-least-once: a link may appear twice (identical), never not at all.
* **A checkpoint** — key: its origin; value: ``{checkpointId, createdAt, note, origin,
  rootHash, size}`` where ``note`` is the signed C2SP note (the evidence; the other fields are
  conveniences read from it).

Header ``rt.audit.kind`` says which (``link`` or ``checkpoint``).
"""

from __future__ import annotations

import base64

import orjson

from runtrail.audit.link import Link
from runtrail.audit.store import StoredCheckpoint
from runtrail.events.jsonform import canonical_bytes

#: integers up to here are written alike by orjson and RFC 8785 (beyond: as floats there)
_SAFE_INTEGER = 2**53

KIND_HEADER = "rt.audit.kind"
LINK = b"link"
CHECKPOINT = b"checkpoint"


def link_line(link: Link) -> bytes:
    """The link's export line, without the newline: RFC 8785 of its JSON form.

    Built around the event's canonical bytes (``event`` sorts first, then the scalar fields),
    which is the same bytes as canonicalising the whole object, without doing it twice.
    """
    fields = {  # in JCS order already: their text is RFC 8785 as orjson writes it
        "hash": link.hash,
        "index": link.index,
        "prevHash": link.prev_hash,
        "runId": link.run_id,
        "tenantId": link.tenant_id,
    }
    try:
        tail = orjson.dumps(fields) if 0 <= link.index < _SAFE_INTEGER else canonical_bytes(fields)
    except orjson.JSONEncodeError:  # a lone surrogate: the reference implementation decides
        tail = canonical_bytes(fields)
    return b'{"event":' + link.canonical() + b"," + tail[1:]


def link_message(link: Link) -> tuple[bytes, bytes]:
    """(key, value) of a link on the audit topic."""
    return link.run_id.encode(), link_line(link)


def checkpoint_message(stored: StoredCheckpoint) -> tuple[bytes, bytes]:
    """(key, value) of a signed checkpoint on the audit topic."""
    checkpoint = stored.checkpoint
    value = canonical_bytes(
        {
            "checkpointId": stored.checkpoint_id,
            "createdAt": stored.created_at,
            "note": stored.note,
            "origin": checkpoint.origin,
            "rootHash": base64.b64encode(checkpoint.root_hash).decode(),
            "size": checkpoint.size,
        }
    )
    return checkpoint.origin.encode(), value
