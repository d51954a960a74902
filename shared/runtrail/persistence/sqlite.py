"""The one SQLite configuration every SQLite adapter opens its database with.

Why one: the stores had four slightly different sets of pragmas. Here: the file is created
0600 in a 0700 folder before SQLite makes it (and its WAL), WAL journal (readers never block
the writer), a busy timeout (a second process waits instead of failing at once),
autocommit mode (``isolation_level=None``: every write is an explicit ``BEGIN IMMEDIATE`` …
``COMMIT``, so a batch is all or nothing), and a connection usable from any thread (access is
serialised by :class:`SqliteDatabase`'s lock).

A page cache of :data:`CACHE_KIB` (SQLite's default is 2 MiB): a store's indexes keyed by
random IDs (the audit chain's ``(tenant, eventId)``) are written all over once they outgrow
the cache, and every page missed is read back from the file. Inserting 147,000 audit links in
2,048-link transactions took 6.0 s of CPU with 2 MiB and 4.1 s with 32 MiB (64 MiB: the same).
It is an upper bound per connection, filled only as pages are used.

``page_size``: the page size of a database this connection creates (SQLite fixes it with the
first table, so an existing file keeps its own). SQLite's default is 4 KiB; a store of rows
of a kilobyte or more indexed by random keys takes less CPU and writes less with larger
pages (the audit links, see its store).

``create=False`` (a store opened to read, see :func:`~runtrail.persistence.migrations.opening`):
the file must exist (:class:`NoDatabase` otherwise: no folder or file is made), no pragma that
writes is set (journal mode, page size) and the connection is ``query_only``. It is opened
read-write all the same (``mode=rw``, never created): a read-only connection cannot remove the
WAL and shared-memory files it made when it closes, a read-write one, the last to close, does.

``synchronous``: ``NORMAL`` (the default) may lose the last transactions on a power cut —
safe for a store that keeps its positions in the same transaction, since the lost events are
consumed again; ``FULL`` for a store whose committed rows must survive (the audit chain).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote

from runtrail.files import open_private, private_dir
from runtrail.persistence.migrations import (
    Component,
    check,
    migrate,
    migrate_or_close,
    opening_mode,
)
from runtrail.persistence.urls import MEMORY

Synchronous = Literal["NORMAL", "FULL"]

#: How long a connection waits for another process's write lock before "database is locked".
BUSY_TIMEOUT_MS = 10_000
#: The page cache of each connection, in KiB (see the module doc).
CACHE_KIB = 32 * 1024


class NoDatabase(FileNotFoundError):
    """An SQLite store that must exist (to be read, or moved) does not: a mistyped path must
    not become a new, empty store."""


def require_database(path: str | Path) -> None:
    """:class:`NoDatabase` unless ``path`` is an existing file (or :data:`MEMORY`)."""
    if str(path) != MEMORY and not Path(path).is_file():
        raise NoDatabase(f"no SQLite database at {path}")


def connect(
    path: str | Path,
    *,
    synchronous: Synchronous = "NORMAL",
    foreign_keys: bool = False,
    page_size: int | None = None,
    create: bool = True,
) -> sqlite3.Connection:
    """A new connection to the database at ``path`` (or :data:`MEMORY`), configured as above
    (``create=False``: an existing file, only read: see the module doc)."""
    target = str(path)
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous is NORMAL or FULL, not {synchronous!r}")
    if not create:
        require_database(target)
    elif target != MEMORY:
        private_dir(Path(target).parent)
        _create_private(target)
    uri = not create and target != MEMORY
    conn = sqlite3.connect(
        f"file:{quote(target)}?mode=rw" if uri else target,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
        uri=uri,
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not create:
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute("PRAGMA query_only = ON")
        return conn
    if page_size is not None:  # before WAL: a new database takes it with its first write
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")  # negative: KiB, not pages
    if target != MEMORY:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    if foreign_keys:
        conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _create_private(target: str) -> None:
    """Create the file 0600 before SQLite does (its WAL and shared memory take its mode), and
    never open one that exists: closing any descriptor of a database file drops every POSIX
    lock this process holds on it, so a second connection of a process (a store's reader
    beside its writer) would leave the first unlocked; another process then takes itself for
    the last connection, checkpoints and deletes the WAL the first keeps writing into, unseen
    until it closes."""
    with suppress(FileExistsError):
        open_private(target, "x").close()


class SqliteDatabase:
    """One configured connection, a lock, and all-or-nothing write transactions."""

    dialect: Final = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        foreign_keys: bool = False,
        components: Sequence[Component] = (),
        page_size: int | None = None,
    ) -> None:
        """Open the database and apply ``components``' pending migrations (closed again if
        they fail, e.g. :class:`~runtrail.persistence.migrations.StoreTooNew`); opened to read
        (:func:`~runtrail.persistence.migrations.opening`), it only checks them."""
        self.path = str(path)
        mode = opening_mode()
        if mode == "existing":  # written as by its service, but never made here
            require_database(path)
        self._conn = connect(
            path,
            synchronous=synchronous,
            foreign_keys=foreign_keys,
            page_size=page_size,
            create=mode != "read",
        )
        self._lock = threading.RLock()
        migrate_or_close(self, components, mode)

    @property
    def connection(self) -> sqlite3.Connection:
        """The raw connection; hold :meth:`locked` while using it."""
        return self._conn

    @contextmanager
    def locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; any exception rolls everything back. IMMEDIATE
        takes the write lock at the start, so two writers serialise instead of failing."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            finally:
                cur.close()

    def query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read (autocommit: it sees every committed write)."""
        with self._lock:
            return [tuple(row) for row in self._conn.execute(statement, tuple(params))]

    def migrate(self, components: Sequence[Component]) -> dict[str, int]:
        """Apply the components' pending migrations (see :mod:`runtrail.persistence.migrations`;
        put :data:`runtrail.persistence.tracking.TRACKING` first if the store keeps positions)."""
        return migrate(
            self.transaction, self.dialect, components, where=f"the SQLite store {self.path}"
        )

    def check(self, components: Sequence[Component], *, older: bool = False) -> None:
        """Raise unless every component's schema is here (see
        :func:`runtrail.persistence.migrations.check`); reads only."""
        check(
            self.query, self.dialect, components, where=f"the SQLite store {self.path}", older=older
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# --- rebuilding a file with other pages --------------------------------------------------------
#: the page sizes SQLite takes
PAGE_SIZES: Final = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
#: how many SQLite VM steps between two calls of a rebuild's progress callback
PROGRESS_STEPS = 200_000


class InUse(Exception):
    """Another connection holds the database: it cannot be rebuilt now."""


@dataclass(frozen=True)
class Repaged:
    """A database's page size and file size before and after :func:`repage`."""

    page_size_before: int
    page_size: int
    bytes_before: int
    bytes: int


def repage(
    path: str | Path, page_size: int, *, progress: Callable[[], None] | None = None
) -> Repaged:
    """Rebuild the existing database at ``path`` with ``page_size`` pages (SQLite's
    ``VACUUM``: every table, index and trigger copied as they are; rowids of tables without an
    ``INTEGER PRIMARY KEY`` may be renumbered, which no runtrail store reads).

    Only alone: leaving WAL needs every other connection closed, so a service still writing
    the file (or a reader) makes this raise :class:`InUse`, the file untouched. The journal
    mode the file had is set again after, also when the rebuild failed. ``progress`` is
    called every :data:`PROGRESS_STEPS` steps of the rebuild (it cannot say how far it is)."""
    if page_size not in PAGE_SIZES:
        raise ValueError(f"a page size is one of {', '.join(map(str, PAGE_SIZES))}")
    target = Path(path)
    require_database(target)
    bytes_before = target.stat().st_size
    conn = sqlite3.connect(str(target), isolation_level=None, timeout=1.0)
    try:
        before = int(conn.execute("PRAGMA page_size").fetchone()[0])
        if before == page_size:
            return Repaged(before, before, bytes_before, bytes_before)
        journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
        try:
            left = str(conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0])
        except sqlite3.OperationalError as exc:  # "database is locked"
            raise InUse(f"{target} is open elsewhere ({exc})") from exc
        if left.lower() != "delete":
            raise InUse(f"{target} is open elsewhere (it stays in {left} mode)")
        try:
            conn.execute(f"PRAGMA page_size = {page_size}")
            if progress is not None:
                conn.set_progress_handler(lambda: progress() or 0, PROGRESS_STEPS)
            conn.execute("VACUUM")
        finally:
            conn.set_progress_handler(None, 0)
            conn.execute(f"PRAGMA journal_mode = {journal}")
        after = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    return Repaged(before, after, bytes_before, target.stat().st_size)
