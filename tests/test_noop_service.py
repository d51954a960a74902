"""noop's output file: one line per event, and none for a partition given up before its flush
(its events are read again from where the output was durable: a line kept would be doubled)."""

from __future__ import annotations

from pathlib import Path

from runtrail.config import Settings
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.noop.service import NoopService
from tests.projection_support import full_run


def test_lines_of_a_partition_given_up_before_the_flush_are_dropped(tmp_path: Path) -> None:
    out = tmp_path / "noop.out"
    context = ServiceContext(settings=Settings(state_dir=tmp_path), options={"output": str(out)})
    service = NoopService(context)
    events = full_run("r").events
    try:
        service.process([Delivered(e, {}, "t", i % 2, i, 0, b"r") for i, e in enumerate(events)])
        service.on_revoked([("t", 1)])
        service.flush()
        lines = out.read_text().splitlines()
        assert lines == [f"{e.event_id} 0 {i}" for i, e in enumerate(events) if i % 2 == 0]
        service.flush()  # nothing left to write twice
        assert out.read_text().splitlines() == lines
    finally:
        service.close()
