"""The two SQL dialects the stores speak, and the one way to write a statement for both.

Why one function: a store's statements are written once, with sqlite3's ``?`` placeholders,
and turned into psycopg's ``%s`` for PostgreSQL here. A statement holding a literal ``%`` is
refused rather than mangled: psycopg would read it as the start of a placeholder.
"""

from __future__ import annotations

from typing import Literal

Dialect = Literal["sqlite", "postgresql"]


def placeholders(statement: str, dialect: Dialect) -> str:
    """``statement`` (written with ``?`` placeholders) as ``dialect`` takes it."""
    if dialect == "sqlite":
        return statement
    if "%" in statement:
        raise ValueError("statement holds a literal %; cannot convert its placeholders")
    return statement.replace("?", "%s")
