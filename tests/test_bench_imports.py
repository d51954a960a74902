"""Every benchmark module imports against the code as it is now: a refactor that moves a helper
must move the benchmarks' imports too (``bench.compare`` once broke that way unnoticed). The
peers (Quix Streams, pyinstrument) are imported only when a benchmark runs them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_the_benchmark_module_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
