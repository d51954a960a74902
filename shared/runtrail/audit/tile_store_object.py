"""The log's static objects in a bucket: ``s3://bucket/prefix?…`` and every obstore back end.

Apart from :mod:`.tile_store` so that a folder needs no object-store client (the ``s3`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import obstore
import obstore.exceptions

from runtrail.persistence.object_store import open_object_store
from runtrail.persistence.url_options import split_options
from runtrail.runtime.unavailable import StoreUnavailable


class ObjectTileStore:
    """``s3://bucket/prefix?…`` (and every other obstore back end)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    @classmethod
    def from_url(cls, url: str) -> ObjectTileStore:
        base, options = split_options(url)
        return cls(open_object_store(base, options))

    def put(self, path: str, data: bytes) -> None:
        try:
            obstore.put(self.store, path, data)
        except (OSError, obstore.exceptions.BaseError) as exc:
            raise StoreUnavailable("audit tile store", str(exc)) from exc

    def put_all(self, objects: Iterable[tuple[str, bytes]]) -> None:
        for path, data in objects:
            self.put(path, data)

    def get(self, path: str) -> bytes | None:
        try:
            return bytes(obstore.get(self.store, path).bytes())
        except FileNotFoundError:
            return None
        except obstore.exceptions.NotFoundError:
            return None
