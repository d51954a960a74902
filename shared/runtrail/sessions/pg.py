"""The PostgreSQL side of the session stores (snapshots and LangGraph checkpoint records): one database
on the persistence layer's pool, its migrations applied at open, every error naming the store.

Why one: the two PostgreSQL adapters each had their own lazy reconnect and error wrapping.
Here connections come from :class:`~runtrail.persistence.postgres.PostgresDatabase` (health-
checked, replaced when the server dropped them), and any database error — the server away
included — is a :class:`~runtrail.sessions.errors.SessionStoreError` naming the store, which
the sessions service treats as "the store cannot take writes now".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from runtrail.persistence.migrations import Component
from runtrail.persistence.postgres import Connection, PostgresDatabase
from runtrail.persistence.urls import redact_url
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail.sessions.errors import SessionStoreError

T = TypeVar("T")

#: What a database call can fail with that means "the store", not a bug in the caller.
_STORE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, StoreUnavailable)


class SessionDatabase:
    """A pooled PostgreSQL database holding one component's tables (see the module docstring)."""

    def __init__(
        self, url: str, *, what: str, component: Component, connect_timeout_s: int = 10
    ) -> None:
        self.where = redact_url(url)
        self._what = what
        try:
            self._db = PostgresDatabase(url, what=what, connect_timeout_s=connect_timeout_s)
        except _STORE_ERRORS as exc:
            raise SessionStoreError(f"{what} {self.where}: {exc}") from exc
        try:
            self._db.migrate((component,))
        except _STORE_ERRORS as exc:
            self._db.close()
            raise SessionStoreError(f"{what} {self.where}: {exc}") from exc

    def run(self, work: Callable[[Connection], T]) -> T:
        """``work`` on a healthy pooled connection (autocommit; ``work`` opens its own
        transaction); a database error becomes a SessionStoreError naming the store."""
        try:
            with self._db.connection() as conn:
                return work(conn)
        except _STORE_ERRORS as exc:
            raise SessionStoreError(f"{self._what} {self.where}: {exc}") from exc

    def rows(self, statement: Any, params: Any = ()) -> list[tuple[Any, ...]]:
        """Every row of one read."""
        return self.run(lambda conn: conn.execute(statement, params).fetchall())

    def row(self, statement: Any, params: Any = ()) -> tuple[Any, ...] | None:
        """The first row of one read, or None."""
        return self.run(lambda conn: conn.execute(statement, params).fetchone())

    def close(self) -> None:
        self._db.close()


class PostgresBacked:
    """The constructor, :meth:`describe` and :meth:`close` of a PostgreSQL session-side store:
    a subclass names itself (``what``) and its migrations (``component``)."""

    what: str
    component: Component

    def __init__(self, url: str, *, connect_timeout_s: int = 10) -> None:
        self.url = url
        self._db = SessionDatabase(
            url, what=self.what, component=self.component, connect_timeout_s=connect_timeout_s
        )

    def describe(self) -> str:
        return self._db.where

    def close(self) -> None:
        self._db.close()
