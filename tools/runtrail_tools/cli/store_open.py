"""Opening a store a command was pointed at: a store that cannot be reached or read is an
answer for the user (which store, why), not a traceback.

Read commands (``projection show|list``, ``cache stats|get|export|import``) open a store
named by a flag or a setting; a wrong host, a missing database or an unwritable folder used to
end in a psycopg/sqlite3 traceback. ``runtrail`` (``cli.main``) prints :class:`StoreUnreachable`
as one line and exits 2. The URL and the driver's message are masked, as ``runtrail settings``
masks them, since a store URL may carry a password.

A command that only reads opens its store with ``mode="read"``
(:func:`runtrail.persistence.migrations.opening`): it never creates, migrates or changes it. A
missing SQLite file, a store of another kind, one made by a newer (or older) runtrail are each
one line naming the store, as is a store locked while it is read.

Also here, for the commands that read one run: which tenant holds it when none was given
(:func:`tenant_scope`, :func:`tenant_holding`), the same for the projection and the audit chain.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from runtrail.persistence.migrations import MigrationError, Opening, opening
from runtrail.publisher.redaction import redact_text

T = TypeVar("T")

#: Tenants named when a run ID is in several (a run read without --tenant).
MAX_CANDIDATES = 10


class StoreUnreachable(Exception):
    """A store cannot be opened; the message names it (masked) and says why."""


class AmbiguousRun(ValueError):
    """A run ID given without a tenant is in several tenants (exit 2: pick one)."""


def is_store_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the store cannot be used (unreachable, missing, locked, not of this
    kind or version), as opposed to a fault of the command itself."""
    if isinstance(exc, OSError | sqlite3.Error | MigrationError):
        return True
    # only loaded with the runtime (the services extra): importing it here would make every
    # command, even one that needs no store, need that extra
    unavailable = sys.modules.get("runtrail.runtime.unavailable")
    if unavailable is not None and isinstance(exc, unavailable.StoreUnavailable):
        return True
    psycopg = sys.modules.get("psycopg")  # only loaded when a postgresql:// store was opened
    return psycopg is not None and isinstance(exc, psycopg.Error)


def explain_store_error(kind: str, url: str, exc: BaseException, *, doing: str = "open") -> str:
    """One line: the ``kind`` store at ``url`` (masked), what could not be done, and why."""
    reason = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
    return f"cannot {doing} the {kind} store {redact_text(url)}: {reason}"


@contextmanager
def store_errors_explained(kind: str, url: str, *, doing: str = "read") -> Iterator[None]:
    """Within: a store error (see :func:`is_store_error`) is :class:`StoreUnreachable`."""
    try:
        yield
    except Exception as exc:
        if not is_store_error(exc):
            raise
        raise StoreUnreachable(explain_store_error(kind, url, exc, doing=doing)) from exc


def open_store_or_explain(
    kind: str, url: str, opener: Callable[[], T], *, mode: Opening = "create"
) -> T:
    """``opener()`` with stores opened as ``mode`` says (``"read"`` for a command that only
    reads), or :class:`StoreUnreachable` naming the ``kind`` store at ``url``."""
    with store_errors_explained(kind, url, doing="open"), opening(mode):
        return opener()


def missing_store(url: str, three_slashes: str = "absolute") -> str | None:
    """Why there is no store at ``url`` to use without making one, or None when there is (or
    may be: a server's database is never created by opening it; connecting says). A flag that
    names a store to read, or to delete from, must name one that exists: opening a mistyped
    SQLite path or folder would make an empty store and answer as if it held nothing.
    ``three_slashes``: how the store's kind reads ``sqlite:///x.db`` (:func:`sqlite_path`)."""
    from pathlib import Path

    from runtrail.persistence.sqlite import NoDatabase, require_database
    from runtrail.persistence.urls import scheme_of, sqlite_path

    scheme = scheme_of(url)
    if scheme == "memory":
        return "is in memory: a new, empty store, with nothing in it"
    if scheme == "sqlite":
        path = sqlite_path(url, three_slashes=three_slashes)
        try:
            require_database(path)
        except NoDatabase:
            return f"does not exist (no file {path}); it is not made here"
    if scheme == "file":
        from urllib.parse import urlsplit
        from urllib.request import url2pathname

        folder = Path(url2pathname(urlsplit(url).path))
        if not folder.is_dir():
            return f"does not exist (no folder {folder}); it is not made here"
    return None


def tenant_scope(args: argparse.Namespace) -> str | None:
    """The one tenant to read (``--tenant``, else ``RUNTRAIL_TENANT`` if set), or None: all."""
    return getattr(args, "tenant", None) or os.environ.get("RUNTRAIL_TENANT") or None


def tenant_holding(run: str, tenants: Sequence[str]) -> str | None:
    """The tenant holding ``run`` among ``tenants`` (every tenant a store found holding it, up
    to ``MAX_CANDIDATES + 1`` of them), None when none does; :class:`AmbiguousRun` naming them
    when several do (tenants never mix: the user picks one with ``--tenant``)."""
    found = list(dict.fromkeys(tenants))
    if len(found) > 1:
        names = ", ".join(repr(t) for t in found[:MAX_CANDIDATES])
        more = " and more" if len(found) > MAX_CANDIDATES else ""
        raise AmbiguousRun(
            f"run {run!r} is in several tenants ({names}{more}): choose one with --tenant"
        )
    return found[0] if found else None
