"""The two SQL dialects the stores speak, the databases that speak them, and the one way to
write a statement for both.

Why one function: a store's statements are written once, with sqlite3's ``?`` placeholders,
and turned into psycopg's ``%s`` for PostgreSQL here. A statement holding a literal ``%`` is
refused rather than mangled: psycopg would read it as the start of a placeholder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:
    # psycopg is the postgres extra: imported only where a postgresql:// URL is opened.
    from runtrail.persistence.postgres import PostgresDatabase
    from runtrail.persistence.sqlite import SqliteDatabase

Dialect = Literal["sqlite", "postgresql"]
#: A database of either dialect: what a store's shared SQL runs on.
Database: TypeAlias = "SqliteDatabase | PostgresDatabase"


def placeholders(statement: str, dialect: Dialect) -> str:
    """``statement`` (written with ``?`` placeholders) as ``dialect`` takes it."""
    if dialect == "sqlite":
        return statement
    if "%" in statement:
        raise ValueError("statement holds a literal %; cannot convert its placeholders")
    return statement.replace("?", "%s")
