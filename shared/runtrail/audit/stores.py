"""Open the audit link store a URL names: ``sqlite:///path.db`` or ``postgresql://…``.

The PostgreSQL adapter is imported only when asked for, so the embedded default needs no
database driver installed.
"""

from __future__ import annotations

from pathlib import Path

from runtrail.audit.store import LinkStore

SCHEMES = ("sqlite", "postgresql", "postgres")


def sqlite_url(path: str | Path) -> str:
    """The ``sqlite:///…`` URL of a file (made absolute: a relative URL path has no meaning)."""
    return f"sqlite://{Path(path).resolve()}"


def open_link_store(url: str) -> LinkStore:
    """A :class:`LinkStore` for ``url``; :class:`ValueError` for any other scheme."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "sqlite":
        from runtrail.audit.store_sqlite import SqliteLinkStore

        return SqliteLinkStore.from_url(url)
    if scheme in ("postgresql", "postgres"):
        from runtrail.audit.store_postgres import PostgresLinkStore

        return PostgresLinkStore.from_url(url)
    raise ValueError(
        f"unsupported audit store URL {redact_url(url)!r} (use sqlite:/// or postgresql://)"
    )


def redact_url(url: str) -> str:
    """``url`` with any password replaced, for logs and error messages."""
    head, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    credentials, _, host = rest.partition("@")
    user = credentials.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in credentials else url
