"""Readers resolve references where the caller is entitled to the tenant.

One walk for every reader (capture records, cache entries, event forms, session snapshots):
each string that is a reference becomes the content, or :data:`~runtrail.privacy.reference.ERASED`
when that content was erased, pruned or cannot be opened here (no content store configured).
A reader that resolves nothing (no reference in the value) gets the value back unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from runtrail.privacy.reference import ERASED, PATTERN, PREFIX, ContentRef, as_reference
from runtrail.privacy.vault import ContentVault

if TYPE_CHECKING:
    from runtrail.capture.record import NodeIoRecord
    from runtrail.config import Settings
    from runtrail.sessions.snapshot import AgentSessionSnapshot

#: The member a resolved session document carries: its content is opened, so its ``digest``
#: (taken over the stored form, references included) does not cover it, and no snapshot
#: reader accepts it as a stored snapshot (unknown members are refused).
RESOLVED_MEMBER = "resolved"


class Resolver:
    def __init__(self, vault: ContentVault | None) -> None:
        self.vault = vault

    def ref(self, tenant: str, ref: ContentRef) -> Any:
        return ERASED if self.vault is None else self.vault.resolve(tenant, ref)

    def one(self, tenant: str, text: str) -> Any:
        """A string holding references: the content of one that is all of it, else the text
        with each reference replaced by its content as text (streamed deltas joined)."""
        if PREFIX not in text:
            return text
        whole = as_reference(text)
        if whole is not None:
            return self.ref(tenant, whole)

        def spelled(found: re.Match[str]) -> str:
            content = self.ref(tenant, ContentRef.of(found))
            return content if isinstance(content, str) else orjson.dumps(content).decode()

        return PATTERN.sub(spelled, text)

    def value(self, tenant: str, value: Any) -> Any:
        """``value`` with every reference in it resolved (a new value; the input is kept)."""
        kind = type(value)
        if kind is str:
            return self.one(tenant, value)
        if kind is dict:
            return {k: self.value(tenant, v) for k, v in value.items()}
        if kind is list:
            return [self.value(tenant, v) for v in value]
        return value

    def close(self) -> None:
        if self.vault is not None:
            self.vault.close()


def resolver_from_settings(settings: Settings) -> Resolver:
    """The resolver of the configured content store (none configured: every reference reads
    as erased, since its content cannot be opened here)."""
    from runtrail.privacy.protect import vault_from_settings

    return Resolver(vault_from_settings(settings))


def resolved_record(resolver: Resolver, record: NodeIoRecord) -> NodeIoRecord:
    """A capture record with its references resolved (the record itself when it holds none)."""
    form = record.model_dump(mode="json", by_alias=True)
    opened = resolver.value(record.tenant_id, form)
    return record if opened == form else type(record).model_validate(opened)


def resolved_snapshot(resolver: Resolver, snapshot: AgentSessionSnapshot) -> dict[str, Any]:
    """A session snapshot's document with every reference opened (``[erased]`` where the
    content is gone), marked with :data:`RESOLVED_MEMBER`: what a restore shows a caller
    entitled to the tenant."""
    opened = resolver.value(snapshot.tenant_id, orjson.loads(snapshot.to_bytes()))
    opened[RESOLVED_MEMBER] = True
    return dict(opened)


def holds_erased(value: Any) -> bool:
    """Whether a value lost content to erasure, or still holds a reference nobody opened: a
    live replay must not call a model or a tool with it."""
    kind = type(value)
    if kind is str:
        return bool(value == ERASED or PREFIX in value)
    if kind is dict:
        return any(holds_erased(v) for v in value.values())
    if kind is list:
        return any(holds_erased(v) for v in value)
    return False
