"""The store errors that mean "cannot write now" rather than "this write is wrong".

Why: a full disk, a read-only file, a database that restarts or refuses connections must
become :class:`~runtrail.runtime.unavailable.StoreUnavailable` (the runtime waits it out,
503 on ``/readyz``), never a crash; one tuple, used by every service that writes to a
file, SQLite or PostgreSQL, so they all classify alike.

psycopg is not imported here: a process that never opened a PostgreSQL store has not imported
it (it comes with the ``postgres`` extra) and cannot see its errors, so
:func:`transient_store_errors` adds ``psycopg.OperationalError`` only once psycopg is loaded.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import TypeVar

from runtrail.runtime.unavailable import StoreUnavailable

#: OSError: ENOSPC, EFBIG, EROFS, EACCES, EIO… ; sqlite3.OperationalError: "database or disk is
#: full", "attempt to write a readonly database", "database is locked".
_ALWAYS: tuple[type[Exception], ...] = (OSError, sqlite3.OperationalError)


def transient_store_errors() -> tuple[type[Exception], ...]:
    """The "cannot write now" errors; with psycopg loaded also ``psycopg.OperationalError``
    (the server is down, restarting or refusing connections)."""
    psycopg = sys.modules.get("psycopg")
    return _ALWAYS if psycopg is None else (*_ALWAYS, psycopg.OperationalError)


T = TypeVar("T")


def unavailable_on_store_errors(what: str, work: Callable[[], T]) -> T:
    """Run ``work``; a transient store error becomes :class:`StoreUnavailable` naming ``what``."""
    try:
        return work()
    except transient_store_errors() as exc:
        raise StoreUnavailable(what, f"{type(exc).__name__}: {exc}") from exc
