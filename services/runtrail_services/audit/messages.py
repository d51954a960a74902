"""What the audit topic carries: sealed links and signed tree heads, as JSON.

* **A link** — key: the run ID; value: the link's export line (RFC 8785 of ``{event, hash,
  index, prevHash, runId, tenantId}``, docs/AUDIT_FORMAT.md §3), so a downstream verifier can
  append the values of one run to a file and check it with ``tools/verify_audit_export.py``.
  Delivery is at-least-once: a link may appear twice (identical), never not at all.
* **A tree head** — key: its origin; value: ``{checkpointId, createdAt, note, origin,
  rootHash, size}`` where ``note`` is the signed C2SP note (the evidence; the other fields are
  conveniences read from it).

Header ``rt.audit.kind`` says which: ``link`` or ``checkpoint`` (a tree head). These names and
``checkpointId`` are what readers of the topic already parse, so they stay as written.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator

import orjson

from runtrail.audit.link import Link
from runtrail.audit.store import StoredTreeHead
from runtrail.events.jsonform import canonical_bytes

#: integers up to here are written alike by orjson and RFC 8785 (beyond: as floats there)
_SAFE_INTEGER = 2**53

KIND_HEADER = "rt.audit.kind"
LINK = b"link"
TREE_HEAD = b"checkpoint"


def _run_tail(run_id: str, tenant_id: str) -> bytes:
    """``"runId":…,"tenantId":…}``: the last members of every export line of the run."""
    fields = {"runId": run_id, "tenantId": tenant_id}  # in JCS order; orjson writes their text
    try:  # as RFC 8785 does
        return orjson.dumps(fields)[1:]
    except orjson.JSONEncodeError:  # a lone surrogate: the reference implementation decides
        return canonical_bytes(fields)[1:]


def _plain(text: str) -> bool:
    """ASCII letters and digits only: JSON text with nothing to escape (a hash as sealed)."""
    return text.isascii() and text.isalnum()


#: an export line whose hashes need no escaping and whose index is an exact JSON integer
_LINE = b'{"event":%b,"hash":"%b","index":%d,"prevHash":"%b",%b'


def _line(link: Link, run_tail: bytes) -> bytes:
    """The export line of ``link`` whose run's members are ``run_tail`` (see :func:`link_line`)."""
    index, hash_, prev_hash = link.index, link.hash, link.prev_hash
    # a hash seal() computed here is lowercase hex; any other (read back) is checked
    if 0 <= index < _SAFE_INTEGER and (link.self_hashed or _plain(hash_)) and _plain(prev_hash):
        return _LINE % (link.canonical(), hash_.encode(), index, prev_hash.encode(), run_tail)
    # anything else (an index past 2**53, a hash read back from an edited store): the
    # reference implementation writes, or refuses, the members before the run's
    fields = {"hash": hash_, "index": index, "prevHash": prev_hash}
    return b'{"event":' + link.canonical() + b"," + canonical_bytes(fields)[1:-1] + b"," + run_tail


def link_line(link: Link) -> bytes:
    """The link's export line, without the newline: RFC 8785 of its JSON form.

    Built around the event's canonical bytes (``event`` sorts first, then ``hash``,
    ``index``, ``prevHash``, ``runId``, ``tenantId``), which is the same bytes as
    canonicalising the whole object, without doing it twice.
    """
    return _line(link, _run_tail(link.run_id, link.tenant_id))


def link_messages(links: Iterable[Link]) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of each link on the audit topic: the run ID and :func:`link_line`. A flush
    sends one per sealed event, so each run's key and line tail are made once per call."""
    runs: dict[tuple[str, str], tuple[bytes, bytes]] = {}
    for link in links:
        ids = link.ids
        run = (ids[0], ids[1]) if ids is not None else (link.tenant_id, link.run_id)
        made = runs.get(run)
        if made is None:
            made = runs[run] = (run[1].encode(), _run_tail(run[1], run[0]))
        yield made[0], _line(link, made[1])


def tree_head_message(stored: StoredTreeHead) -> tuple[bytes, bytes]:
    """(key, value) of a signed tree head on the audit topic."""
    tree_head = stored.tree_head
    value = canonical_bytes(
        {
            "checkpointId": stored.tree_head_id,
            "createdAt": stored.created_at,
            "note": stored.note,
            "origin": tree_head.origin,
            "rootHash": base64.b64encode(tree_head.root_hash).decode(),
            "size": tree_head.size,
        }
    )
    return tree_head.origin.encode(), value
