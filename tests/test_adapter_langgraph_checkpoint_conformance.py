"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against each store.

The suite detects which capabilities a saver implements (base: put, put_writes, get_tuple,
list, delete_thread; extended: delete_for_runs, copy_thread, prune) and runs its spec tests
for each. Every capability must be detected and every one of its tests must pass, on the file
store and on a real PostgreSQL server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver


def _assert_full_conformance(url: str, name: str) -> None:
    @checkpointer_test(name=name)
    async def saver() -> AsyncIterator[RuntrailCheckpointSaver]:
        made = RuntrailCheckpointSaver.from_url(url, tenant_id="conformance")
        try:
            yield made
        finally:
            made.close()

    report = asyncio.run(validate(saver))
    report.print_report()
    results = report.results
    assert {c.value for c in ALL_CAPABILITIES} <= set(results), results.keys()
    failed = {
        name: result.failures
        for name, result in results.items()
        if not (result.detected and result.passed and result.tests_failed == 0)
    }
    assert not failed, f"conformance failures: {failed}"
    assert all(result.tests_passed > 0 for result in results.values())
    assert report.passed_all() and report.conformance_level() == "FULL"


def test_file_store_passes_the_langgraph_conformance_suite(tmp_path: Path) -> None:
    _assert_full_conformance((tmp_path / "sessions").as_uri(), "RuntrailCheckpointSaver[file]")


def test_postgres_store_passes_the_langgraph_conformance_suite(postgres_url: str) -> None:
    _assert_full_conformance(postgres_url, "RuntrailCheckpointSaver[postgresql]")
