"""The projector's own settings as users set them (``RUNTRAIL_PROJECTOR_*`` in the environment
of ``runtrail run projector`` and of ``runtrail replay projection``): ``halt_on_gap`` and
``cached_runs``. (What the folder does with each, given directly: test_projector_units.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.projection import replay as pure_replay
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.projector.service import ProjectorService
from tests.projection_support import full_run
from tests.projector_support import (
    forms,
    interleave,
    projection_at,
    projector,
    replay,
    sqlite_url,
    wait_caught_up,
)
from tests.support import create_topic, produce_forms, unique_topic


def test_halt_on_gap_false_records_the_gap_in_the_service_and_in_its_replay(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_PROJECTOR_HALT_ON_GAP=false`` a run whose event 10 never arrived is
    projected on, the hole recorded as a gap, by the service and by the replay that reads the
    same variable (the docs: keep it the same for both). If the service ignored it, the run
    would be halted at event 11 and its later events dead-lettered; if the replay ignored it,
    the shadow rebuild would differ from the live store."""
    topic = create_topic(kafka_bootstrap, unique_topic("gap"), partitions=1)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=1)
    holed_run, whole_run = full_run("holed"), full_run("whole")
    holed = [e for e in holed_run.events if e.sequence != 10]
    produce_forms(
        kafka_bootstrap,
        topic,
        interleave([e.json_form() for e in holed], forms(whole_run)),
    )
    live = tmp_path / "live.db"
    proc = projector(
        kafka_bootstrap,
        topic,
        live,
        tmp_path / "projector.log",
        env={"RUNTRAIL_PROJECTOR_HALT_ON_GAP": "false"},
    )
    try:
        wait_caught_up(kafka_bootstrap, live, topic, 1, timeout=30)
        assert proc.terminate() == 0
    finally:
        proc.close()
    with projection_at(live) as store:
        row = store.get("t1", "holed")
        assert row is not None and not row.halted, row
        assert row.state is not None and row.version == holed[-1].sequence
        assert [(g.first, g.last) for g in row.state.gaps] == [(10, 10)]
        assert row.state == pure_replay(holed)
        whole = store.get("t1", "whole")
        assert whole is not None and whole.state == pure_replay(whole_run.events)

    monkeypatch.setenv("RUNTRAIL_PROJECTOR_HALT_ON_GAP", "false")
    status, out, err = replay(
        kafka_bootstrap,
        topic,
        tmp_path / "shadow.db",
        "--quiet",
        "--compare-with",
        sqlite_url(live),
    )
    assert status == 0, out + err
    assert "no difference" in out and "halted runs: 0" in out, out


def _delivered(events: list[dict[str, Any]], first_offset: int) -> list[Delivered]:
    from runtrail.events import validate_json_form

    return [
        Delivered(validate_json_form(f), f, "events", 0, first_offset + i, 0, f["runId"].encode())
        for i, f in enumerate(events)
    ]


def test_cached_runs_bounds_the_run_states_kept_and_evicted_runs_are_reloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_PROJECTOR_CACHED_RUNS=2`` the projector keeps two run states after a
    flush: the other three runs of the partition are read back from the store when they speak
    again, and every run still ends as the pure replay of its events. If the setting were
    ignored (50 000 cached), nothing would be read back: a projector told to bound its memory
    would hold every run it ever met."""
    monkeypatch.setenv("RUNTRAIL_PROJECTOR_CACHED_RUNS", "2")
    runs = [full_run(f"run-{i}") for i in range(5)]
    first = interleave(*([e.json_form() for e in r.events[:5]] for r in runs))
    rest = interleave(*([e.json_form() for e in r.events[5:]] for r in runs))
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state", events_topic="events"),
        options={"store_url": sqlite_url(tmp_path / "p.db")},
    )
    service = ProjectorService(context)
    try:
        service.on_assigned([("events", 0)])
        service.process(_delivered(first, 0))
        service.flush()
        reads: list[str] = []
        read = service.store.get

        def counted(tenant: str, run: str) -> Any:
            reads.append(run)
            return read(tenant, run)

        monkeypatch.setattr(service.store, "get", counted)
        service.process(_delivered(rest, len(first)))
        service.flush()
        assert sorted(reads) == ["run-0", "run-1", "run-2"]  # the oldest three, once each
        for r in runs:
            row = read("t1", r.run_id)
            assert row is not None and row.state == pure_replay(r.events)
    finally:
        service.close()
