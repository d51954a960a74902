"""Store URLs: the one way to mask them for logs and the one way to name an SQLite file.

Why here: every store kind is opened by URL, and a URL may carry a password (``user:pw@``) or
a token in its query (``?access_key_id=…``). Each kind had its own masking, one of which kept
the query; this is the strictest of them, used everywhere.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

#: ``sqlite:///:memory:``'s path: an in-process database, no file.
MEMORY = ":memory:"

#: The schemes obstore opens (capture records go to any object store it knows).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https")

#: The schemes whose adapters need a driver from an extra: a URL of one of them, opened where
#: that extra is not installed, raises :class:`~runtrail.extras.MissingExtra` naming it.
SCHEME_EXTRAS: dict[str, str] = {
    "postgresql": "postgres",
    "postgres": "postgres",
    **dict.fromkeys(OBJECT_STORE_SCHEMES, "s3"),
}


def scheme_of(url: str) -> str:
    """The URL's scheme, lower case; ``""`` when ``url`` has none (a bare path)."""
    head, sep, _ = url.partition("://")
    if not sep:
        head, sep, _ = url.partition(":")
        if not sep or not head.isalpha() or len(head) < 2:
            return ""
    return head.lower()


def redact_url(url: str) -> str:
    """``url`` fit for logs and error messages: the password masked (``user:***@host``), the
    query and fragment dropped (either may carry a token). A string that is not a URL is
    returned as it is."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    location, slash, tail = rest.partition("/")
    path = tail.split("?", 1)[0].split("#", 1)[0]
    if "?" in location or "#" in location:  # no path: the query starts in the location
        location = location.split("?", 1)[0].split("#", 1)[0]
        slash, path = "", ""
    credentials, at, host = location.rpartition("@")
    if at:
        user, colon, _ = credentials.partition(":")
        location = f"{user}:***@{host}" if colon else f"{user}@{host}"
    return f"{head}://{location}{slash}{path}"


def sqlite_url(path: str | Path) -> str:
    """The ``sqlite:////abs/path.db`` URL of a file, made absolute: four slashes, so every
    reading of the URL (``sqlite:///relative`` or ``sqlite:///absolute``) finds the same file."""
    return f"sqlite:///{Path(path).expanduser().resolve()}"


def sqlite_path(url: str, *, three_slashes: str = "absolute") -> str:
    """The file of a ``sqlite://`` URL, or :data:`MEMORY` for ``sqlite:///:memory:``.

    ``sqlite:////abs.db`` is ``/abs.db`` for every store. ``sqlite:///x.db`` is read as
    ``three_slashes`` says: ``"absolute"`` (``/x.db``, the audit and resume-cache stores) or
    ``"relative"`` (``x.db`` in the working folder, the projection store, as SQLAlchemy reads
    it). A host (``sqlite://host/x.db``) is refused: SQLite files are local.
    """
    if not url.lower().startswith("sqlite://"):
        raise ValueError(f"not a sqlite:/// URL: {redact_url(url)!r}")
    parts = urlsplit(url)
    if parts.netloc:
        raise ValueError(f"sqlite URLs have no host: {redact_url(url)} (use sqlite:///path.db)")
    path = unquote(parts.path)
    if path in ("", "/", "/" + MEMORY):
        return MEMORY
    if path.startswith("//"):
        return "/" + path.lstrip("/")
    if three_slashes == "relative":
        return path[1:]
    if three_slashes != "absolute":
        raise ValueError(f"three_slashes is 'absolute' or 'relative', not {three_slashes!r}")
    return path


def file_path(url: str) -> Path:
    """The folder of a ``file:///abs/dir`` (or ``file://relative/dir``) URL."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        raise ValueError(f"not a file:// URL: {redact_url(url)!r}")
    netloc = "" if parts.netloc in ("", "localhost") else parts.netloc
    return Path(unquote(netloc + parts.path))
