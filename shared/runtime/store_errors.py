"""Which store errors mean "cannot take writes now" rather than "this event is bad".

Why: a full disk, a read-only folder or a lost database connection must make a service wait
(``StoreUnavailable``: not ready, nothing committed, retried), never crash it or dead-letter the
event that happened to be in flight. One classification, used by every store-writing service.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from runtrail.runtime.unavailable import StoreUnavailable

#: SQLite messages of a store that cannot write now (full, read-only, I/O, busy).
_SQLITE_OUTAGE = ("readonly", "read-only", "disk i/o", "full", "locked", "unable to open")
#: psycopg error classes of a lost or refused connection.
_PSYCOPG_OUTAGE = ("OperationalError", "InterfaceError")


def is_store_outage(exc: BaseException) -> bool:
    """True for an error that waiting can fix: OS-level I/O, SQLite full/read-only/I/O, a
    PostgreSQL connection that is gone."""
    if isinstance(exc, OSError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        message = str(exc).lower()
        return any(word in message for word in _SQLITE_OUTAGE)
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        return isinstance(exc, tuple(getattr(psycopg, name) for name in _PSYCOPG_OUTAGE))
    return False


@contextmanager
def unavailable_on_outage(what: str) -> Iterator[None]:
    """Turn a store outage raised inside the block into :class:`StoreUnavailable` for ``what``."""
    try:
        yield
    except StoreUnavailable:
        raise
    except Exception as exc:
        if is_store_outage(exc):
            raise StoreUnavailable(what, f"{type(exc).__name__}: {exc}") from exc
        raise


__all__ = ["is_store_outage", "unavailable_on_outage"]
