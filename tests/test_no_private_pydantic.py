"""No module of the package imports pydantic's (or pydantic-core's) private modules.

Private modules (``pydantic._internal`` and friends) change without notice between pydantic
releases; the event classes once subclassed ``ModelMetaclass`` from there (issue 14 item 6).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the source roots of the distribution, plus the tools and benchmarks that ship beside it
SOURCES = ("shared", "services", "schemas", "bench", "tools")
PRIVATE = ("pydantic._", "pydantic_core._")


def private_imports(source: str) -> list[str]:
    """The private pydantic modules ``source`` imports (``import``/``from`` or dotted use)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [ast.unparse(node)]
        found += [name for name in names if name.startswith(PRIVATE)]
    return found


def python_files() -> list[Path]:
    return sorted(p for top in SOURCES for p in (ROOT / top).rglob("*.py"))


def test_the_scan_sees_every_spelling() -> None:
    """The check itself: each way of reaching a private module is reported."""
    assert private_imports("from pydantic._internal._model_construction import M")
    assert private_imports("import pydantic._internal")
    assert private_imports("from pydantic import _internal")
    assert private_imports("import pydantic\nx = pydantic._internal._fields")
    assert private_imports("from pydantic_core._pydantic_core import X")
    assert not private_imports("from pydantic import BaseModel\nimport pydantic_core")


def test_the_scan_covers_the_event_classes() -> None:
    files = python_files()
    assert ROOT / "shared" / "runtrail" / "events" / "envelope.py" in files
    assert len(files) > 100


def test_no_private_pydantic_module_is_imported() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in python_files()
        if (found := private_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
