"""Opening a store of any kind by URL, from the table of :mod:`runtrail.persistence.kinds`.

Every caller opens a store with ``open_store(kind, url, **options)``. The adapter of the URL's
scheme is imported on its first open, so an adapter whose driver is not installed is reported
only when a URL needs it: as a :class:`~runtrail.extras.MissingExtra` naming the ``pip install``
to run when the driver comes with an extra (psycopg: ``postgres``, obstore: ``s3``; the audit
store's signatures: ``services``). A scheme the kind has no adapter for is an
:class:`UnsupportedStoreUrl` naming the kind, the URL (masked) and the schemes known.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

from runtrail.extras import explain
from runtrail.persistence.kinds import KINDS, StoreKind
from runtrail.persistence.urls import redact_url, scheme_of

T = TypeVar("T")


class UnsupportedStoreUrl(ValueError):
    """No adapter of this kind takes the URL's scheme (or the URL has none)."""


def kind_named(kind: StoreKind[T] | str) -> StoreKind[T]:
    """``kind`` itself, or the kind of that name (:class:`ValueError` naming the known ones)."""
    if not isinstance(kind, str):
        return kind
    found = KINDS.get(kind)
    if found is None:
        raise ValueError(f"unknown store kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    return cast(StoreKind[T], found)


def schemes(kind: StoreKind[Any] | str) -> tuple[str, ...]:
    """The schemes ``kind`` stores can be opened with, sorted."""
    return tuple(sorted(kind_named(kind).openers))


def opener(target: str, feature: str | None = None) -> Callable[..., Any]:
    """The callable ``"module:attribute"`` names (the attribute may be dotted); imports the
    module, so a missing driver surfaces here as :class:`~runtrail.extras.MissingExtra` (for
    ``feature``)."""
    module_name, _, path = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = explain(exc, feature)
        if missing is not None:
            raise missing from exc
        raise
    for name in path.split("."):
        found = getattr(found, name)
    return cast(Callable[..., Any], found)


@overload
def open_store(kind: StoreKind[T], url: str, **options: Any) -> T: ...
@overload
def open_store(kind: str, url: str, **options: Any) -> Any: ...
def open_store(kind: StoreKind[Any] | str, url: str, **options: Any) -> Any:
    """The ``kind`` store at ``url``, opened by the adapter of its scheme with ``options``."""
    found = kind_named(kind)
    scheme = scheme_of(url)
    target = found.openers.get(scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in schemes(found))
        if not scheme:
            raise UnsupportedStoreUrl(
                f"not a store URL: {redact_url(url)!r} for the {found.label} "
                f"(known schemes: {known})"
            )
        raise UnsupportedStoreUrl(
            f"unsupported {found.label} URL {redact_url(url)!r}: scheme {scheme}:// is not one "
            f"of {known}"
        )
    return opener(target, f"{found.label} at {scheme}://")(url, **options)
