"""A store URL's options, carried in its query string (``file:///d?fsync=false``): split off
the location, read as the option's type, and refused when nobody consumed them (a typo must not
be silently ignored). The location's own parts are :mod:`runtrail.persistence.urls`."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def split_options(url: str, overrides: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``(url without query, options)``; keyword ``overrides`` win over query parameters."""
    parts = urlsplit(url)
    options: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
    options.update(overrides or {})
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), options


def as_bool(value: Any) -> bool:
    """A boolean option given as a bool or as query text."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def pop_int(options: dict[str, Any], name: str, default: int) -> int:
    """Remove and return an integer option."""
    value = options.pop(name, None)
    return default if value is None or value == "" else int(value)


def pop_float(options: dict[str, Any], name: str, default: float) -> float:
    """Remove and return a float option."""
    value = options.pop(name, None)
    return default if value is None or value == "" else float(value)


def reject_unknown(options: dict[str, Any], what: str) -> None:
    """Fail loudly on options nobody consumed (a typo must not be silently ignored)."""
    if options:
        raise ValueError(f"unknown {what} option(s): {', '.join(sorted(options))}")
