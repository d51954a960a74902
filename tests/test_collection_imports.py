"""Collecting the suite imports no heavy framework: every xdist worker imports every test module,
so a module-level import of one costs its import time once per worker before any test runs.

The frameworks below are imported by the tests and fixtures that use them (or by support modules
those import lazily); a type name can still be imported under ``if TYPE_CHECKING:``. What
collection imports: the test modules, ``conftest.py`` and its plugins, and every ``tests``
module those import at module level, transitively. Read from the source (no import), so this
check costs next to nothing.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: module (or package) -> why it is not imported at collection: its import CPU, roughly
HEAVY = {
    "agents": "the OpenAI Agents SDK, about 1 s",
    "runtrail.adapters.openai_agents": "imports the OpenAI Agents SDK",
    "tests.openai_agents_support": "imports the OpenAI Agents SDK",
    "pydantic_ai": "about 0.7 s",
    "openai": "about 0.5 s",
    "moto": "moto's server, about 0.3 s",
    "litellm": "about 1 s",
    "langgraph.graph": "LangGraph's graph API, about 0.5 s",
    "langgraph.types": "imports LangGraph's graph API",
    "langgraph.prebuilt": "imports LangGraph's graph API",
    "tests.langgraph_checkpoint_graph": "imports LangGraph's graph API",
}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of each import run when the module is imported: its top level and the
    branches of module-level ``if``/``try`` statements, except ``if TYPE_CHECKING:``."""
    found: list[tuple[int, str]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            pending += [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending += [*node.body, *node.orelse, *node.finalbody]
            pending += [s for handler in node.handlers for s in handler.body]
    return found


def _heavy(module: str) -> str | None:
    for name in HEAVY:
        if module == name or module.startswith(name + "."):
            return name
    return None


@cache
def _collected() -> dict[str, list[tuple[int, str]]]:
    """File name -> its module-level imports, for every file of ``tests`` that collecting the
    suite imports."""
    plugins = ast.literal_eval(_assigned(TESTS / "conftest.py", "pytest_plugins"))
    pending = [p.name for p in TESTS.glob("test_*.py")] + ["conftest.py"]
    pending += [f"{plugin.removeprefix('tests.')}.py" for plugin in plugins]
    seen: dict[str, list[tuple[int, str]]] = {}
    while pending:
        name = pending.pop()
        if name in seen or not (TESTS / name).is_file():
            continue
        tree = ast.parse((TESTS / name).read_text(encoding="utf-8"), name)
        seen[name] = _module_level_imports(tree)
        pending += [
            f"{m.removeprefix('tests.')}.py" for _, m in seen[name] if m.startswith("tests.")
        ]
    return seen


def _assigned(path: Path, variable: str) -> str:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == variable for t in node.targets
        ):
            return ast.unparse(node.value)
    raise AssertionError(f"{path.name} sets no {variable}")


def test_no_test_module_imports_a_heavy_framework_at_collection() -> None:
    offenders = set()
    for name, imports in _collected().items():
        for line, module in imports:
            heavy = _heavy(module)
            if heavy is not None:
                offenders.add(f"{name}:{line}: {heavy} ({HEAVY[heavy]})")
    assert not offenders, "import these inside the tests or fixtures that use them:\n" + (
        "\n".join(sorted(offenders))
    )


def test_collection_reaches_the_plugins_and_the_support_modules_the_tests_import() -> None:
    collected = _collected()
    assert {"conftest.py", "s3_fixture.py", "support.py", "test_native.py"} <= set(collected)
    assert "openai_agents_support.py" not in collected  # imported inside the tests only


def test_the_check_sees_what_runs_at_import_and_skips_type_checking() -> None:
    source = """
import os
from agents import Agent
if TYPE_CHECKING:
    from pydantic_ai import Agent as PAgent
try:
    import litellm
except ImportError:
    from moto import server
def later():
    import openai
"""
    modules = {m for _, m in _module_level_imports(ast.parse(source))}
    assert {_heavy(m) for m in modules} - {None} == {"agents", "litellm", "moto"}
