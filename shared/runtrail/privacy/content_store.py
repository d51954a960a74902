"""Where sealed content lives: the interface every content-store adapter implements.

Objects are keyed ``<tenant>/<keyId>/<digest>``: everything sealed by one data key sits
under one prefix, so erasing a subject deletes one prefix, and a tenant's content is one
folder, bucket prefix or key range. Objects hold ciphertext only; the ``name`` is what a
reference's ``store`` field says (a URL may carry credentials, a reference never does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

#: The ``store`` of references written through a store whose URL names none (``?name=``).
DEFAULT_NAME = "main"


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    modified_s: float


class ContentStore(Protocol):
    name: str

    def put(self, key: str, blob: bytes) -> None: ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when it is not there (erased, pruned, never written)."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (ending in ``/``); how many."""
        ...

    def delete(self, key: str) -> None: ...

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete these objects (absent ones are ignored); how many were there."""
        ...

    def objects(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def sync(self) -> None:
        """Make every object put so far durable (the publisher calls it in each group commit
        of its spool, before the spool's fsync); a no-op where a put is durable when it
        returns."""
        ...

    def close(self) -> None: ...


def object_key(tenant: str, key_id: str, digest: str) -> str:
    return f"{key_prefix(tenant, key_id)}{digest}"


def key_prefix(tenant: str, key_id: str) -> str:
    return f"{_tenant_segment(tenant)}/{key_id}/"


@lru_cache(maxsize=4096)  # once per tenant, not per sealed field
def _tenant_segment(tenant: str) -> str:
    # imported here: the publisher imports this module, and an agent that configures no
    # content store should not load the sessions package
    from runtrail.sessions.naming import segment

    return segment(tenant)
