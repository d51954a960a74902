"""Content in PostgreSQL (``postgresql://…?name=…``): one row per object in ``runtrail_content``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlencode

from runtrail.persistence.migrations import Component, Migration
from runtrail.persistence.postgres import PostgresDatabase
from runtrail.persistence.url_options import split_options
from runtrail.privacy.content_store import DEFAULT_NAME, StoredObject

CONTENT = Component(
    "content",
    [
        Migration(
            1,
            "content objects",
            [
                """CREATE TABLE IF NOT EXISTS runtrail_content (
                    key TEXT PRIMARY KEY,
                    blob BYTEA NOT NULL,
                    modified_s DOUBLE PRECISION NOT NULL)"""
            ],
        )
    ],
)


class PostgresContentStore:
    def __init__(self, url: str, name: str = DEFAULT_NAME) -> None:
        self.name = name
        self._db = PostgresDatabase(url, what="content store", components=[CONTENT])

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> PostgresContentStore:
        base, options = split_options(url, overrides)
        name = str(options.pop("name", DEFAULT_NAME))
        query = urlencode({k: v for k, v in options.items()})  # libpq's own (sslmode…)
        return cls(f"{base}?{query}" if query else base, name)

    def put(self, key: str, blob: bytes) -> None:
        self._db.query(
            "INSERT INTO runtrail_content (key, blob, modified_s) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING",
            (key, blob, time.time()),
        )

    def get(self, key: str) -> bytes | None:
        rows = self._db.query("SELECT blob FROM runtrail_content WHERE key = %s", (key,))
        return bytes(rows[0][0]) if rows else None

    def delete(self, key: str) -> None:
        self._db.query("DELETE FROM runtrail_content WHERE key = %s", (key,))

    def delete_many(self, keys: Iterable[str]) -> int:
        doomed = list(keys)
        if not doomed:
            return 0
        rows = self._db.query(
            "DELETE FROM runtrail_content WHERE key = ANY(%s) RETURNING key", (doomed,)
        )
        return len(rows)

    def delete_prefix(self, prefix: str) -> int:
        rows = self._db.query(
            "DELETE FROM runtrail_content WHERE starts_with(key, %s) RETURNING key", (prefix,)
        )
        return len(rows)

    def objects(self, prefix: str = "") -> Iterator[StoredObject]:
        rows = self._db.query(
            "SELECT key, octet_length(blob), modified_s FROM runtrail_content "
            "WHERE starts_with(key, %s) ORDER BY key",
            (prefix,),
        )
        for key, size, modified in rows:
            yield StoredObject(key, int(size), float(modified))

    def sync(self) -> None:
        """Nothing to do: a put is durable when it returns."""

    def close(self) -> None:
        self._db.close()
