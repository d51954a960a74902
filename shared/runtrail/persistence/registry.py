"""One registry from URL scheme to store adapter, for every store kind.

Why: five kinds of store (capture records, resume entries, session snapshots, LangGraph
checkpoints, audit links, projections) each had their own URL opener with its own error text.
Now an adapter module registers itself (``register(kind, schemes, factory)``) and every
caller opens a store with ``open_store(kind, url, **options)``.

A kind names the modules that register its adapters; they are imported on the kind's first
open, so a process that never opens a PostgreSQL store never imports psycopg, and an adapter
whose driver is not installed is reported by name (with the import error) instead of being
an unknown scheme; when that driver comes with an extra (psycopg: ``postgres``, obstore:
``s3``; see ``urls.SCHEME_EXTRAS``) the error is a :class:`~runtrail.extras.MissingExtra`
naming the ``pip install`` to run.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload

from runtrail.extras import MissingExtra, explain
from runtrail.persistence.urls import SCHEME_EXTRAS, redact_url, scheme_of

T = TypeVar("T")

#: What an adapter registers: ``factory(url, **options)`` returns the open store.
Factory = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class StoreKind(Generic[T]):
    """A kind of store: its name, how errors call it, and the modules holding its adapters."""

    name: str
    label: str
    adapters: tuple[str, ...]


class UnsupportedStoreUrl(ValueError):
    """No adapter of this kind takes the URL's scheme (or the URL has none)."""


_lock = threading.RLock()
_factories: dict[str, dict[str, Factory]] = {}
_broken: dict[str, dict[str, str]] = {}  # kind -> adapter module -> why it did not import
_missing: dict[str, dict[str, MissingExtra]] = {}  # kind -> extra -> the driver it lacks
_kinds: dict[str, StoreKind[Any]] = {}


def define_kind(name: str, label: str, adapters: tuple[str, ...]) -> StoreKind[Any]:
    """Declare a store kind (see :mod:`runtrail.persistence.kinds`); names are unique."""
    kind: StoreKind[Any] = StoreKind(name, label, adapters)
    with _lock:
        if name in _kinds and _kinds[name] != kind:
            raise ValueError(f"store kind {name!r} is already defined")
        _kinds[name] = kind
    return kind


def register(kind: StoreKind[Any] | str, schemes: tuple[str, ...], factory: Factory) -> None:
    """Make ``factory`` open ``kind`` stores for each of ``schemes`` (lower case, no ``://``).

    Called by an adapter module at import. Registering the same factory again is harmless;
    another factory for a taken scheme is an error (two adapters would race for one URL).
    """
    name = kind if isinstance(kind, str) else kind.name
    with _lock:
        table = _factories.setdefault(name, {})
        for scheme in schemes:
            taken = table.get(scheme)
            if taken is not None and taken is not factory:
                raise ValueError(f"scheme {scheme}:// of {name} stores is already registered")
            table[scheme] = factory


def _kind(kind: StoreKind[Any] | str) -> StoreKind[Any]:
    if not isinstance(kind, str):
        return kind
    found = _kinds.get(kind)
    if found is None:
        raise ValueError(f"unknown store kind {kind!r} (known: {', '.join(sorted(_kinds))})")
    return found


def _load(kind: StoreKind[Any], scheme: str | None = None) -> None:
    """Import the kind's adapter modules in order until one registers ``scheme`` (all of them
    when ``scheme`` is None or no module takes it). Not under ``_lock``: an import in another
    thread registering at the same time must not wait for this one (Python's import system
    serialises imports of one module; a second import is a dictionary lookup)."""
    for module in kind.adapters:
        if scheme is not None and scheme in _factories.get(kind.name, {}):
            return
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = explain(exc) if isinstance(exc, ModuleNotFoundError) else None
            with _lock:
                _broken.setdefault(kind.name, {})[module] = str(exc)
                if missing is not None:
                    _missing.setdefault(kind.name, {})[missing.extra] = missing


def schemes(kind: StoreKind[Any] | str) -> tuple[str, ...]:
    """The schemes ``kind`` stores can be opened with, sorted."""
    found = _kind(kind)
    _load(found)
    return tuple(sorted(_factories.get(found.name, {})))


@overload
def open_store(kind: StoreKind[T], url: str, **options: Any) -> T: ...
@overload
def open_store(kind: str, url: str, **options: Any) -> Any: ...
def open_store(kind: StoreKind[Any] | str, url: str, **options: Any) -> Any:
    """The ``kind`` store at ``url``, opened by the adapter registered for its scheme.

    Raises :class:`~runtrail.extras.MissingExtra` when the scheme's adapter needs a driver
    whose extra is not installed, or the kind's adapters an extra that is no driver's (the
    audit store: ``services``), else :class:`UnsupportedStoreUrl` (a ValueError) naming the
    kind, the URL (redacted), the schemes known, and any adapter module of the kind that could
    not be imported.
    """
    found = _kind(kind)
    scheme = scheme_of(url)
    _load(found, scheme)
    factory = _factories.get(found.name, {}).get(scheme)
    if factory is not None:
        return cast(Any, factory(url, **options))
    missing_here = _missing.get(found.name, {})
    lacking = missing_here.get(SCHEME_EXTRAS.get(scheme, ""))
    if lacking is None:
        # an extra that is no store driver (services: the audit store's signatures) is needed
        # by the kind itself, whatever the scheme
        drivers = set(SCHEME_EXTRAS.values())
        lacking = next((m for e, m in sorted(missing_here.items()) if e not in drivers), None)
    if lacking is not None:
        raise MissingExtra(str(lacking.name), lacking.extra, f"{found.label} at {scheme}://")
    known = ", ".join(f"{s}://" for s in schemes(found)) or "none"
    broken = _broken.get(found.name, {})
    missing = ""
    if broken:
        why = "; ".join(f"{module}: {error}" for module, error in sorted(broken.items()))
        missing = f" (adapters that could not be imported here: {why})"
    if not scheme:
        raise UnsupportedStoreUrl(
            f"not a store URL: {redact_url(url)!r} for the {found.label} "
            f"(known schemes: {known}){missing}"
        )
    raise UnsupportedStoreUrl(
        f"unsupported {found.label} URL {redact_url(url)!r}: scheme {scheme}:// is not one of "
        f"{known}{missing}"
    )
