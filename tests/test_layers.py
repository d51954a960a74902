"""The layers hold: the import contracts of ``pyproject.toml`` pass (import-linter), and no
package imports itself in a circle.

The library (``runtrail``) is what an agent installs and what the services are built from; the
services (``runtrail_services``) sit on it; the tools (``runtrail_tools``: the command, demo,
explorer, dev stack, local broker) sit on both. An upward import would make an agent's install
load services, or a service load the explorer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtrail", "runtrail_services", "runtrail_tools")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every group of modules that import each other in a circle (Tarjan's strongly connected
    components of the module graph, groups of two or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(root: str) -> None:  # iterative: the graph is deeper than the recursion limit
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            for imported in edges:
                if imported not in index:
                    index[imported] = low[imported] = len(index)
                    stack.append(imported)
                    on_stack.add(imported)
                    work.append(
                        (imported, iter(sorted(graph.find_modules_directly_imported_by(imported))))
                    )
                    break
                if imported in on_stack:
                    low[module] = min(low[module], index[imported])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        cycles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_package_imports_itself_in_a_circle() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    assert import_cycles(graph) == []


def test_a_circle_is_found() -> None:
    """The cycle finder is not vacuous: two modules of the graph importing each other."""
    graph = grimp.ImportGraph()
    for module in ("pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
