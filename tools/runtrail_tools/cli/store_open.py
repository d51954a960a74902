"""Opening a store a command was pointed at: a store that cannot be reached or read is an
answer for the user (which store, why), not a traceback.

Read commands (``projection show|list``, ``cache stats|get|export|import``) open a store
named by a flag or a setting; a wrong host, a missing database or an unwritable folder used to
end in a psycopg/sqlite3 traceback. ``runtrail`` (``cli.main``) prints :class:`StoreUnreachable`
as one line and exits 2. The URL and the driver's message are masked, as ``runtrail settings``
masks them, since a store URL may carry a password.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import TypeVar

from runtrail.publisher.redaction import redact_text

T = TypeVar("T")


class StoreUnreachable(Exception):
    """A store cannot be opened; the message names it (masked) and says why."""


def _is_store_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError | sqlite3.Error):
        return True
    # only loaded with the runtime (the services extra): importing it here would make every
    # command, even one that needs no store, need that extra
    unavailable = sys.modules.get("runtrail.runtime.unavailable")
    if unavailable is not None and isinstance(exc, unavailable.StoreUnavailable):
        return True
    psycopg = sys.modules.get("psycopg")  # only loaded when a postgresql:// store was opened
    return psycopg is not None and isinstance(exc, psycopg.Error)


def open_store_or_explain(kind: str, url: str, opener: Callable[[], T]) -> T:
    """``opener()``, or :class:`StoreUnreachable` naming the ``kind`` store at ``url``."""
    try:
        return opener()
    except Exception as exc:
        if not _is_store_error(exc):
            raise
        reason = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        raise StoreUnreachable(
            f"cannot open the {kind} store {redact_text(url)}: {reason}"
        ) from exc
