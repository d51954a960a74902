"""Sealing content into the content store and opening references again: the one place both
happen, so the publisher, every reader and erasure agree on keys, places and markers.

``put`` seals a JSON value with the subject's data key and stores it under its digest;
``resolve`` opens a reference for a caller entitled to the tenant, and gives
:data:`~runtrail.privacy.reference.ERASED` (never an exception) when the key was destroyed or
the object is gone; ``erase`` destroys a subject's data key first (from then on nothing of it
can be opened, wherever a copy of the ciphertext survives), then deletes its objects.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from runtrail.privacy.content_store import ContentStore, key_prefix, object_key
from runtrail.privacy.keys import KeyStore, associated
from runtrail.privacy.reference import ERASED, ContentRef
from runtrail.privacy.sealing import Unsealable, seal, unseal


@dataclass(frozen=True, slots=True)
class Erased:
    """What erasing a subject destroyed."""

    key_id: str | None
    objects: int


class ContentVault:
    def __init__(self, content: ContentStore, keys: KeyStore) -> None:
        self.content = content
        self.keys = keys

    @property
    def store_name(self) -> str:
        return self.content.name

    def put_json(self, tenant: str, subject: str, encoded: bytes) -> ContentRef:
        """Seal ``encoded`` (a JSON value's bytes) for the subject; its reference."""
        key = self.keys.data_key(tenant, subject)
        blob = seal(key.secret, encoded, associated(tenant, key.key_id))
        digest = hashlib.sha256(blob).hexdigest()
        self.content.put(object_key(tenant, key.key_id, digest), blob)
        return ContentRef(self.content.name, key.key_id, digest, len(encoded))

    def put(self, tenant: str, subject: str, value: Any) -> ContentRef:
        return self.put_json(tenant, subject, orjson.dumps(value))

    def resolve(self, tenant: str, ref: ContentRef) -> Any:
        """The content ``ref`` names, or :data:`ERASED` when it can no longer be opened."""
        if ref.store != self.content.name:
            return ERASED
        secret = self.keys.key_by_id(tenant, ref.key_id)
        if secret is None:
            return ERASED
        blob = self.content.get(object_key(tenant, ref.key_id, ref.digest))
        if blob is None or hashlib.sha256(blob).hexdigest() != ref.digest:
            return ERASED
        try:
            return orjson.loads(unseal(secret, blob, associated(tenant, ref.key_id)))
        except Unsealable:
            return ERASED

    def erase(self, tenant: str, subject: str, known_key_id: str | None = None) -> Erased:
        """Destroy the subject's data key and delete its objects. ``known_key_id``: the key an
        earlier attempt destroyed, whose objects may be left (an erasure run again)."""
        destroyed = self.keys.destroy(tenant, subject)
        keys = {k for k in (destroyed, known_key_id) if k is not None}
        objects = sum(self.content.delete_prefix(key_prefix(tenant, k)) for k in sorted(keys))
        return Erased(destroyed or known_key_id, objects)

    def sync(self) -> None:
        """Make what was sealed so far durable: the keys first, then the content they open."""
        self.keys.sync()
        self.content.sync()

    def close(self) -> None:
        self.content.close()
        self.keys.close()
