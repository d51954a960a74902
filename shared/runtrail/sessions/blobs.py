"""Large snapshots by reference: an object per snapshot, named by its digest.

A snapshot too large to carry inline on the sessions topic (Kafka messages are meant to be
small) is put in object storage at ``<tenant>/<session>/<sha256>.json`` under the blob URL's
prefix, and the topic carries its reference and digest instead. The key is the content
digest, so uploading the same snapshot again (after a crash) rewrites the same object, and a
reader checks the digest of what it fetched. Any obstore URL works: ``s3://bucket/prefix?…``
(options in the query, as for the capture sink), or ``file:///dir``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import obstore

from runtrail.capture.object_store import open_store
from runtrail.capture.urls import split_options
from runtrail.files import private_dir
from runtrail.persistence.urls import file_path
from runtrail.sessions.errors import CorruptSnapshot, SessionStoreError
from runtrail.sessions.naming import segment
from runtrail.sessions.snapshot import DIGEST_PREFIX, AgentSessionSnapshot, parse_snapshot


class SnapshotBlobStore:
    """Puts and gets whole snapshots in object storage, addressed by digest."""

    def __init__(self, url: str) -> None:
        base, options = split_options(url)
        if urlsplit(base).scheme.lower() == "file":
            private_dir(file_path(base))  # 0700: blob files get obstore's default mode
        self.base = base.rstrip("/")  # no query: references carry no credentials
        self._store: Any = open_store(base, options)

    def key_of(self, snapshot: AgentSessionSnapshot) -> str:
        digest = snapshot.digest.removeprefix(DIGEST_PREFIX)
        return f"{segment(snapshot.tenant_id)}/{segment(snapshot.session_id)}/{digest}.json"

    def put(self, snapshot: AgentSessionSnapshot, data: bytes | None = None) -> str:
        """Upload the snapshot (its stored bytes); returns its reference (a URL)."""
        key = self.key_of(snapshot)
        try:
            obstore.put(self._store, key, data if data is not None else snapshot.to_bytes())
        except Exception as exc:  # obstore raises its own hierarchy
            raise SessionStoreError(f"cannot upload snapshot to {self.base}/{key}: {exc}") from exc
        return f"{self.base}/{key}"

    def get(self, reference: str, digest: str) -> AgentSessionSnapshot:
        """Fetch a referenced snapshot and verify it is the one ``digest`` names."""
        prefix = self.base + "/"
        if not reference.startswith(prefix):
            raise SessionStoreError(f"reference {reference} is not under {self.base}")
        try:
            data = bytes(obstore.get(self._store, reference[len(prefix) :]).bytes())
        except Exception as exc:
            raise SessionStoreError(f"cannot fetch snapshot {reference}: {exc}") from exc
        snapshot = parse_snapshot(data, reference)
        if snapshot.digest != digest:
            raise CorruptSnapshot(reference, f"is {snapshot.digest}, the reference says {digest}")
        return snapshot
