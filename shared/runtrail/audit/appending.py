"""The check every link store makes before appending a batch: does each link extend its head?

Kept apart from the stores so that SQLite and PostgreSQL refuse exactly the same batches: a link
must sit at its run's current length with the current last hash as its prevHash, and its hash
must be its own (hashed again here unless :func:`~runtrail.audit.link.seal` made it in this
process); a link identical to one already stored (a retried batch) is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from runtrail.audit.canonical import GENESIS_HASH, hash_canonical
from runtrail.audit.errors import ChainConflict
from runtrail.audit.link import Link

RunKey = tuple[str, str]


class LinkRow(NamedTuple):
    """One row of a links table: the event is the RFC 8785 text that was hashed."""

    tenant_id: str
    run_id: str
    idx: int
    event_id: str
    prev_hash: str
    hash: str
    event: str


def rows_to_append(
    links: Sequence[Link],
    heads: Mapping[RunKey, tuple[int, str]],
    is_stored: Callable[[Link], bool],
) -> list[LinkRow]:
    """Rows for the links that are new; :class:`ChainConflict` if one does not extend its head.

    ``heads`` maps each run of the batch to its stored (length, last hash) — runs with no links
    may be absent; ``is_stored`` tells whether an identical link is already at its index.
    """
    current = dict(heads)
    rows: list[LinkRow] = []
    for link in links:
        ids = link.ids  # set by seal(), which checked them; else read from the event
        tenant, run, event_id = (
            ids if ids is not None else (link.tenant_id, link.run_id, link.event_id)
        )
        key = (tenant, run)
        length, last = current.get(key, (0, GENESIS_HASH))
        if link.index < length and is_stored(link):
            continue  # a retried batch: this exact link is already there
        if link.index != length or link.prev_hash != last:
            raise ChainConflict(
                f"link {link.index} of run {tenant}/{run} does not extend its head "
                f"(length {length}, hash {last})"
            )
        canonical = link.canonical()
        # a link seal() made hashed these very bytes; any other is hashed here
        if not link.self_hashed and hash_canonical(link.prev_hash, canonical) != link.hash:
            raise ChainConflict(f"link {link.index} of run {tenant}/{run}: hash is not its own")
        rows.append(
            LinkRow(
                tenant, run, link.index, event_id, link.prev_hash, link.hash, canonical.decode()
            )
        )
        current[key] = (length + 1, link.hash)
    return rows
