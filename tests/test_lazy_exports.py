"""A package's lazily exported names never share a name with one of its submodules.

Why: once such a submodule is imported (by anyone, for any of its names), the import system sets
it as the package's attribute, and ``from package import name`` gives the module from then on:
which one a caller got depended on what was imported before
(``from runtrail.projection import replay`` was the function or the module ``replay.py``).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types

import pytest

PACKAGES = (
    "runtrail.audit",
    "runtrail.capture",
    "runtrail.commands",
    "runtrail.events",
    "runtrail.nodes",
    "runtrail.projection",
    "runtrail.publisher",
    "runtrail.resume",
    "runtrail.runtime",
    "runtrail.sessions",
    "runtrail_tools.devstack",
)


def _exports(package: types.ModuleType) -> set[str]:
    getter = package.__getattr__
    names: set[str] = set()
    for cell in getter.__closure__ or ():
        if isinstance(cell.cell_contents, dict):
            names |= set(cell.cell_contents)
    return names


@pytest.mark.parametrize("name", PACKAGES)
def test_no_lazy_export_is_named_like_a_submodule(name: str) -> None:
    package = importlib.import_module(name)
    exports = _exports(package)
    assert exports, f"{name} exports nothing lazily"
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert not exports & submodules


def test_every_package_with_lazy_exports_is_listed() -> None:
    import runtrail
    import runtrail_tools

    found = set()
    for root in (runtrail, runtrail_tools):
        for info in pkgutil.walk_packages(root.__path__, f"{root.__name__}."):
            if not info.ispkg:
                continue
            module = sys.modules.get(info.name) or importlib.import_module(info.name)
            getter = getattr(module, "__getattr__", None)
            if getter is not None and getter.__qualname__.startswith("lazy_exports"):
                found.add(info.name)
    assert found == set(PACKAGES)


def test_replay_is_the_function_after_its_module_was_imported() -> None:
    importlib.import_module("runtrail.projection.replaying")
    from runtrail.projection import replay

    assert callable(replay) and not isinstance(replay, types.ModuleType)
