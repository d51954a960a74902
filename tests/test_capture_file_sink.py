"""The ``file://`` JSONL sink: layout, durability, rolling, crash repair, and reading back."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import orjson
import pytest

from runtrail.capture import (
    CaptureReadError,
    InMemoryIoCaptureSink,
    JsonlFileSink,
    ObjectStoreSink,
    read_records,
    repair_file,
)
from runtrail.capture.layout import tenant_from_segment, tenant_segment
from runtrail.persistence import CAPTURE_RECORDS, open_store
from tests.capture_support import T0_MS, sample_records, tool_records

DAY_MS = 86_400_000


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _all_files(root: Path) -> list[Path]:
    return sorted(root.rglob("capture-*.jsonl"))


def test_records_are_laid_out_by_tenant_and_capture_date_one_per_line(tmp_path: Path) -> None:
    today = tool_records(2, tenant="acme")
    late = tool_records(1, run_id="run-2", tenant="acme", start_ms=T0_MS + DAY_MS)
    other = tool_records(1, tenant="globex")
    sink = JsonlFileSink(tmp_path)
    sink.write([*today, *late, *other])
    sink.flush()

    assert _all_files(tmp_path) == [
        tmp_path / "acme" / "2024-05-01" / "capture-0.jsonl",
        tmp_path / "acme" / "2024-05-02" / "capture-0.jsonl",
        tmp_path / "globex" / "2024-05-01" / "capture-0.jsonl",
    ]
    first = tmp_path / "acme" / "2024-05-01" / "capture-0.jsonl"
    assert _lines(first) == [r.model_dump(mode="json", by_alias=True) for r in today]
    sink.close()


def test_the_capture_date_is_utc(tmp_path: Path) -> None:
    just_before_midnight = T0_MS + 14 * 3_600_000 - 1_000  # 2024-05-01T23:59:59Z
    [record] = tool_records(1, start_ms=just_before_midnight - 100)
    assert record.captured_at_epoch_ms == just_before_midnight
    sink = JsonlFileSink(tmp_path)
    sink.write([record])
    sink.close()
    assert _all_files(tmp_path) == [tmp_path / "acme" / "2024-05-01" / "capture-0.jsonl"]


@pytest.mark.parametrize("tenant", ["../escape", "a/b", ".", "..", ".hidden", "tenant with space"])
def test_tenant_ids_become_one_safe_reversible_segment(tmp_path: Path, tenant: str) -> None:
    segment = tenant_segment(tenant)
    assert "/" not in segment and segment not in (".", "..") and not segment.startswith(".")
    assert tenant_from_segment(segment) == tenant
    sink = JsonlFileSink(tmp_path / "root")
    sink.write(tool_records(1, tenant=tenant))
    sink.close()
    [path] = _all_files(tmp_path)
    assert path.relative_to(tmp_path / "root").parts[0] == segment
    assert [r.tenant_id for r in read_records(f"file://{tmp_path}/root", tenant=tenant)] == [tenant]


def test_flush_writes_and_fsyncs_the_files_and_new_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr("runtrail.capture.file_sink.os.fsync", recording_fsync)
    sink = JsonlFileSink(tmp_path)
    sink.write(tool_records(3))
    [path] = _all_files(tmp_path)
    assert path.read_bytes() == b""  # buffered until flush
    assert synced == []
    sink.flush()
    assert len(_lines(path)) == 3
    assert str(path) in synced
    assert str(path.parent) in synced  # the new file's directory entry is durable too
    sink.close()


def test_files_roll_by_size(tmp_path: Path) -> None:
    records = tool_records(12)
    line = len(records[0].to_json_line())
    sink = JsonlFileSink(tmp_path, max_bytes=line * 5)
    sink.write(records)
    sink.close()
    day = tmp_path / "acme" / "2024-05-01"
    files = _all_files(tmp_path)
    assert [p.name for p in files] == ["capture-0.jsonl", "capture-1.jsonl", "capture-2.jsonl"]
    assert all(p.parent == day for p in files)
    assert all(p.stat().st_size <= line * 5 + 10 for p in files)
    assert [x["recordId"] for p in files for x in _lines(p)] == [r.record_id for r in records]


def test_a_line_larger_than_max_bytes_still_gets_written(tmp_path: Path) -> None:
    sink = JsonlFileSink(tmp_path, max_bytes=10)
    sink.write(tool_records(2))
    sink.close()
    assert [len(_lines(p)) for p in _all_files(tmp_path)] == [1, 1]


def test_files_roll_by_age(tmp_path: Path) -> None:
    now = [0.0]
    sink = JsonlFileSink(tmp_path, max_age_s=60, clock=lambda: now[0])
    first, second, third = tool_records(3)
    sink.write([first])
    sink.flush()
    now[0] = 59.0
    sink.write([second])
    sink.flush()
    assert [p.name for p in _all_files(tmp_path)] == ["capture-0.jsonl"]
    now[0] = 61.0
    sink.flush()  # an aged file is closed at flush even without new writes
    assert sink.open_paths() == []
    sink.write([third])
    sink.close()
    files = _all_files(tmp_path)
    assert [p.name for p in files] == ["capture-0.jsonl", "capture-1.jsonl"]
    assert [len(_lines(p)) for p in files] == [2, 1]


def test_writers_sharing_a_directory_never_share_a_file(tmp_path: Path) -> None:
    one, two = JsonlFileSink(tmp_path), JsonlFileSink(tmp_path)
    records = tool_records(2)
    one.write(records[:1])
    two.write(records[1:])
    assert sorted(p.name for p in (*one.open_paths(), *two.open_paths())) == [
        "capture-0.jsonl",
        "capture-1.jsonl",
    ]
    one.close()
    two.close()
    assert len(read_records(f"file://{tmp_path}")) == 2


def test_too_many_open_files_are_closed_least_recently_used_first(tmp_path: Path) -> None:
    sink = JsonlFileSink(tmp_path, max_open=2)
    for tenant in ("t1", "t2", "t3"):
        sink.write(tool_records(1, tenant=tenant))
    assert [p.parts[-3] for p in sink.open_paths()] == ["t2", "t3"]
    sink.close()
    assert len(read_records(f"file://{tmp_path}")) == 3


def test_a_partial_last_line_is_cut_when_the_sink_opens(tmp_path: Path) -> None:
    records = tool_records(3)
    day = tmp_path / "acme" / "2024-05-01"
    day.mkdir(parents=True)
    path = day / "capture-0.jsonl"
    whole = b"".join(r.to_json_line() for r in records[:2])
    torn = records[2].to_json_line()[:40]
    path.write_bytes(whole + torn)

    assert [r.record_id for r in read_records(f"file://{tmp_path}")] == [
        r.record_id for r in records[:2]
    ]  # readers never see the torn line, even before repair
    sink = JsonlFileSink(tmp_path)
    assert sink.repaired == [path]
    assert path.read_bytes() == whole
    sink.write(records[2:])
    sink.close()
    assert [r.record_id for r in read_records(f"file://{tmp_path}")] == [
        r.record_id for r in records
    ]
    assert [p.name for p in _all_files(tmp_path)] == ["capture-0.jsonl", "capture-1.jsonl"]


def test_a_file_with_no_complete_line_is_cut_to_empty(tmp_path: Path) -> None:
    path = tmp_path / "capture-0.jsonl"
    path.write_bytes(b'{"recordId": "half')
    assert repair_file(path) is True
    assert path.read_bytes() == b""
    assert repair_file(path) is False


def test_a_long_torn_line_is_found_across_read_chunks(tmp_path: Path) -> None:
    path = tmp_path / "capture-0.jsonl"
    path.write_bytes(b'{"a":1}\n' + b"x" * 200_000)
    assert repair_file(path) is True
    assert path.read_bytes() == b'{"a":1}\n'


def test_a_file_held_by_a_live_writer_is_not_repaired(tmp_path: Path) -> None:
    path = tmp_path / "capture-0.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":')
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a writer is mid-line
        assert repair_file(path) is False
        assert path.read_bytes().endswith(b'{"b":')
    finally:
        os.close(fd)
    assert repair_file(path) is True


def test_readers_return_each_record_once_and_filter(tmp_path: Path) -> None:
    model, tool = sample_records()
    other_run = tool_records(2, run_id="run-2")
    globex = tool_records(1, tenant="globex")
    first = JsonlFileSink(tmp_path)
    first.write([model, tool, *other_run, *globex])
    first.close()
    again = JsonlFileSink(tmp_path)  # at-least-once: a restart writes the same records again
    again.write([tool, model, *other_run])
    again.close()
    url = f"file://{tmp_path}"

    assert len(read_records(url)) == 5
    assert [r.record_id for r in read_records(url, run_id="run-1", tenant="acme")] == [
        model.record_id,
        tool.record_id,
    ]
    assert read_records(url, run_id="run-1", node_type="MODEL", tenant="acme") == [model]
    assert {r.record_id for r in read_records(url, node_type="TOOL")} == {
        r.record_id for r in (tool, *other_run, *globex)
    }
    assert read_records(url, tenant="globex") == globex
    assert read_records(url, tenant="nobody") == []
    assert read_records(f"file://{tmp_path}/missing") == []


def test_read_records_equals_what_was_written(tmp_path: Path) -> None:
    records = sample_records()
    sink = JsonlFileSink(tmp_path)
    sink.write(records)
    sink.close()
    assert read_records(f"file://{tmp_path}") == records  # in stored order


def test_an_invalid_complete_line_is_reported_with_its_place(tmp_path: Path) -> None:
    day = tmp_path / "acme" / "2024-05-01"
    day.mkdir(parents=True)
    (day / "capture-0.jsonl").write_bytes(b'{"recordId": "x"}\n')
    with pytest.raises(CaptureReadError, match=r"capture-0\.jsonl:1"):
        read_records(f"file://{tmp_path}")


def test_writing_after_close_fails(tmp_path: Path) -> None:
    sink = JsonlFileSink(tmp_path)
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink.write(tool_records(1))
    sink.close()  # closing twice is harmless


def test_the_capture_sink_is_picked_by_url(tmp_path: Path) -> None:
    assert isinstance(open_store(CAPTURE_RECORDS, "memory://"), InMemoryIoCaptureSink)
    sink = open_store(
        CAPTURE_RECORDS, f"file://{tmp_path}?max_bytes=1000&max_age_s=5&max_open=3&repair=false"
    )
    assert isinstance(sink, JsonlFileSink)
    assert (sink.root, sink.max_bytes, sink.max_age_s, sink.max_open) == (tmp_path, 1000, 5.0, 3)
    sink.close()
    s3 = open_store(
        CAPTURE_RECORDS, "s3://bucket/prefix?region=us-east-1&compression=zstd&allow_http=true"
    )
    assert isinstance(s3, ObjectStoreSink) and s3.compressed
    with pytest.raises(ValueError, match="max_bites"):
        open_store(CAPTURE_RECORDS, f"file://{tmp_path}?max_bites=10")


def test_memory_sink_is_queryable_by_node_type_and_keeps_each_record_once() -> None:
    model, tool = sample_records()
    sink = InMemoryIoCaptureSink()
    sink.write([model, tool])
    sink.write([model])
    sink.flush()
    sink.close()
    assert sink.records("MODEL") == [model]
    assert sink.records("TOOL") == [tool]
    assert sink.records() == [model, tool]
    assert sink.get(tool.record_id) == tool
    assert len(sink) == 2
