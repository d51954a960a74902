"""The one PostgreSQL connection management: a ``psycopg_pool`` pool with health checks.

Why: the stores had a hand-made pool, two lazy reconnects and one connection that never
came back. Here every store gets a :class:`PostgresDatabase`:

* connections are autocommit; a write is an explicit :meth:`~PostgresDatabase.transaction`;
* a connection is checked before it is handed out (``ConnectionPool.check_connection``), so one
  the server dropped (a restart, ``pg_terminate_backend``, an idle timeout) is replaced
  instead of failing the next call;
* a transient error (the server down, restarting, refusing connections, the pool exhausted:
  ``psycopg.OperationalError``, PostgreSQL's member of
  :func:`runtrail.runtime.store_errors.transient_store_errors`) raises
  :class:`~runtrail.runtime.unavailable.StoreUnavailable`, so the service waits it out; an
  error in the statement itself (a constraint, a trigger) or in the caller's own code passes
  through unchanged.

Opening checks the URL with one direct connection first, so a wrong host, password or
database fails at once with the server's own message (a pool would only time out).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg_pool import ConnectionPool

from runtrail.persistence.migrations import (
    Component,
    check,
    migrate,
    migrate_or_close,
    opening_mode,
)
from runtrail.persistence.urls import redact_url
from runtrail.runtime.unavailable import StoreUnavailable

Connection = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]


def lock_id(*parts: str) -> int:
    """A signed 64-bit advisory-lock id for a key (``parts`` namespace it, e.g. the store)."""
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresDatabase:
    """A pool of autocommit connections to one database (thread-safe)."""

    dialect: Final = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        what: str,
        max_size: int = 4,
        connect_timeout_s: int = 10,
        wait_s: float = 30.0,
        components: Sequence[Component] = (),
    ) -> None:
        """Open the pool and apply ``components``' pending migrations (closed again if they
        fail, e.g. :class:`~runtrail.persistence.migrations.StoreTooNew`); opened to read
        (:func:`~runtrail.persistence.migrations.opening`), it only checks them."""
        self.url = url
        #: Names the store in errors, e.g. ``projection store postgresql://u:***@h/db``.
        self.what = f"{what} {redact_url(url)}"
        self._wait_s = wait_s
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": connect_timeout_s}
        psycopg.connect(url, **kwargs).close()  # the server's own error for a bad URL
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs=kwargs,
            check=ConnectionPool.check_connection,
            open=False,
            name=self.what,
        )
        self._pool.open(wait=True, timeout=wait_s)
        migrate_or_close(self, components, opening_mode())

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A healthy pooled connection (autocommit), returned to the pool afterwards."""
        try:
            with self._pool.connection(timeout=self._wait_s) as conn:
                yield conn
        except psycopg.OperationalError as exc:  # PostgreSQL's transient store error
            raise StoreUnavailable(self.what, f"{type(exc).__name__}: {exc}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction's cursor: committed when the block ends, rolled back if it raises."""
        with self.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield cur

    def query(self, statement: Any, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one statement in autocommit (none for a statement that returns none)."""
        with self.connection() as conn:
            cur = conn.execute(statement, tuple(params))
            return cur.fetchall() if cur.description is not None else []

    def migrate(self, components: Sequence[Component]) -> dict[str, int]:
        """Apply the components' pending migrations (see :mod:`runtrail.persistence.migrations`;
        put :data:`runtrail.persistence.tracking.TRACKING` first if the store keeps positions)."""
        return migrate(self.transaction, self.dialect, components, where=f"the {self.what}")

    def check(self, components: Sequence[Component], *, older: bool = False) -> None:
        """Raise unless every component's schema is here (see
        :func:`runtrail.persistence.migrations.check`); reads only."""
        check(self.query, self.dialect, components, where=f"the {self.what}", older=older)

    def close(self) -> None:
        self._pool.close()
