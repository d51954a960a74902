"""Names a package re-exports, imported from their submodule on first use.

A package ``__init__`` that imports every submodule makes an importer of any one of them pay
for all (``runtrail.audit.errors`` would load the event models and the codec). With
``__getattr__ = lazy_exports(__name__, {...})`` the package's names still resolve
(``from runtrail.events import EventCodec``), each submodule being imported when a name of it
is first asked for; the package keeps the same imports under ``TYPE_CHECKING`` for the type
checker.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps each module to the names it
    gives the package, a submodule by its relative name (``".codec"``), another by its own."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # the next lookup finds it directly
        return value

    return __getattr__
