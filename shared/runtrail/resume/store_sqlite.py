"""The SQLite resume-cache store: ``sqlite:///abs/path.db``, the embedded default.

Two handles on the file, both in the one SQLite configuration
(:mod:`runtrail.persistence.sqlite`): the writer (the consume loop's flushes) and a reader for
the lookups; in WAL mode a reader never waits for the writer. ``synchronous=NORMAL``: a power
cut may lose the last transactions, positions included, so the service consumes them again —
never an entry without its positions or the other way round.
"""

from __future__ import annotations

from runtrail.persistence.sqlite import SqliteDatabase
from runtrail.persistence.urls import MEMORY, sqlite_path
from runtrail.resume.store_sql import SqlCacheStore


def open_sqlite(url: str, *, readers: int = 8) -> SqlCacheStore:
    """The store at ``sqlite:///abs/path.db`` (``sqlite:////abs/path.db`` alike); ``readers``
    is a PostgreSQL option, accepted so one URL setting fits both."""
    del readers
    path = sqlite_path(url, three_slashes="absolute")
    db = SqliteDatabase(path)
    # one in-process database (:memory:): a second handle would be another, empty one
    reads = db if path == MEMORY else SqliteDatabase(path)
    try:
        return SqlCacheStore(db, reads=reads)
    except BaseException:
        reads.close()
        db.close()
        raise
