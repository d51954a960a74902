"""Content in object storage through obstore (``s3://bucket/prefix?endpoint=…&name=…``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import obstore

from runtrail.persistence.object_store import open_object_store
from runtrail.persistence.url_options import split_options
from runtrail.privacy.content_store import DEFAULT_NAME, StoredObject


class ObjectContentStore:
    def __init__(self, store: Any, name: str = DEFAULT_NAME) -> None:
        self._store = store
        self.name = name

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ObjectContentStore:
        base, options = split_options(url, overrides)
        name = str(options.pop("name", DEFAULT_NAME))
        return cls(open_object_store(base, options), name)

    def put(self, key: str, blob: bytes) -> None:
        obstore.put(self._store, key, blob)

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None

    def delete(self, key: str) -> None:
        obstore.delete(self._store, key)

    def delete_many(self, keys: Iterable[str]) -> int:
        doomed = list(keys)
        if doomed:
            obstore.delete(self._store, doomed)
        return len(doomed)

    def delete_prefix(self, prefix: str) -> int:
        keys = [found.key for found in self.objects(prefix)]
        if keys:
            obstore.delete(self._store, keys)
        return len(keys)

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        for page in obstore.list(self._store, prefix=prefix or None):
            for meta in page:
                yield StoredObject(
                    meta["path"], int(meta["size"]), meta["last_modified"].timestamp()
                )

    def sync(self) -> None:
        """Nothing to do: a put is durable when it returns."""

    def close(self) -> None:
        pass
