"""The object-store sink and reader against a real S3 endpoint (moto's server on 127.0.0.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import obstore
import orjson
import pytest
import zstandard

from runtrail.capture import ObjectStoreSink, read_records
from runtrail.capture.object_sink import object_key
from runtrail.persistence import CAPTURE_RECORDS, open_store
from runtrail.persistence.object_store import open_object_store
from runtrail.persistence.url_options import split_options
from runtrail.runtime.unavailable import StoreUnavailable
from tests.capture_support import T0_MS, sample_records, tool_records

if TYPE_CHECKING:
    from tests.s3_fixture import S3Endpoint

DAY_MS = 86_400_000


def _store(url: str) -> Any:
    base, options = split_options(url)
    return open_object_store(base, options)


def _objects(url: str) -> dict[str, bytes]:
    store = _store(url)
    paths = [meta["path"] for chunk in obstore.list(store) for meta in chunk]
    return {path: bytes(obstore.get(store, path).bytes()) for path in sorted(paths)}


def test_flush_puts_one_jsonl_object_per_tenant_and_day(s3_url: str) -> None:
    model, tool = sample_records()
    late = tool_records(1, run_id="run-2", start_ms=T0_MS + DAY_MS)
    globex = tool_records(1, tenant="globex")
    sink = open_store(CAPTURE_RECORDS, s3_url)
    assert isinstance(sink, ObjectStoreSink)
    sink.write([model, tool, *late, *globex])
    assert _objects(s3_url) == {}  # buffered until flush
    sink.flush()

    objects = _objects(s3_url)
    expected_key = object_key("acme", "2024-05-01", [model.record_id, tool.record_id], False)
    assert sorted(objects) == sorted(
        [
            expected_key,
            object_key("acme", "2024-05-02", [late[0].record_id], False),
            object_key("globex", "2024-05-01", [globex[0].record_id], False),
        ]
    )
    assert expected_key.startswith("acme/2024-05-01/capture-")
    assert objects[expected_key] == model.to_json_line() + tool.to_json_line()
    assert sink.uploaded == sorted(objects, key=sink.uploaded.index)
    sink.close()


def test_objects_land_under_the_url_prefix(moto_s3: S3Endpoint) -> None:
    sink = open_store(CAPTURE_RECORDS, moto_s3.url("deep/er/prefix"))
    sink.write(tool_records(1))
    sink.close()
    [key] = [k for k in _objects(moto_s3.url()) if k.startswith("deep/")]
    assert key.startswith("deep/er/prefix/acme/2024-05-01/capture-")


def test_uploading_the_same_batch_again_overwrites_instead_of_duplicating(s3_url: str) -> None:
    records = tool_records(3)
    first = open_store(CAPTURE_RECORDS, s3_url)
    first.write(records)
    first.flush()  # uploaded; the process dies before committing offsets
    before = _objects(s3_url)

    retry = open_store(
        CAPTURE_RECORDS, s3_url
    )  # the restarted process captures the same records again
    retry.write(list(reversed(records)))
    retry.close()
    after = _objects(s3_url)
    assert list(after) == list(before)
    assert len(after) == 1
    again = read_records(s3_url)
    assert sorted(r.record_id for r in again) == sorted(r.record_id for r in records)
    assert len(again) == 3


def test_a_record_repeated_in_one_batch_is_stored_once(s3_url: str) -> None:
    [record] = tool_records(1)
    sink = open_store(CAPTURE_RECORDS, s3_url)
    sink.write([record, record])
    sink.write([record])
    sink.close()
    [body] = _objects(s3_url).values()
    assert body == record.to_json_line()


def test_zstd_objects_are_compressed_and_read_back(s3_url: str) -> None:
    records = tool_records(20)
    sink = open_store(CAPTURE_RECORDS, s3_url + "&compression=zstd&zstd_level=5")
    sink.write(records)
    sink.close()
    [(key, body)] = _objects(s3_url).items()
    assert key.endswith(".jsonl.zst")
    plain = zstandard.ZstdDecompressor().decompress(body)
    assert [orjson.loads(line)["recordId"] for line in plain.splitlines()] == [
        r.record_id for r in records
    ]
    assert len(body) < len(plain)
    assert read_records(s3_url) == records


def test_big_buffers_are_uploaded_before_flush(s3_url: str) -> None:
    records = tool_records(10)
    line = len(records[0].to_json_line())
    sink = open_store(CAPTURE_RECORDS, s3_url, batch_bytes=str(line * 4))
    sink.write(records[:3])
    assert _objects(s3_url) == {}
    sink.write(records[3:5])
    assert len(_objects(s3_url)) == 1
    sink.close()
    assert read_records(s3_url) == records[:5]


def test_a_failed_upload_stays_buffered_for_the_next_flush(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = tool_records(2)
    sink = open_store(CAPTURE_RECORDS, s3_url)
    sink.write(records)
    real_put = obstore.put
    calls = []

    def failing_put(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1])
        if len(calls) == 1:
            raise OSError("connection reset")
        return real_put(*args, **kwargs)

    monkeypatch.setattr("runtrail.capture.object_sink.obstore.put", failing_put)
    with pytest.raises(StoreUnavailable, match="reset"):  # the runtime waits and retries
        sink.flush()
    assert _objects(s3_url) == {}
    sink.flush()
    assert calls[0] == calls[1]  # the same object name on retry
    assert read_records(s3_url) == records


def test_reader_deduplicates_across_objects_and_filters(s3_url: str) -> None:
    model, tool = sample_records()
    run2 = tool_records(2, run_id="run-2")
    globex = tool_records(1, tenant="globex")
    sink = open_store(CAPTURE_RECORDS, s3_url)
    sink.write([model, tool])
    sink.flush()
    sink.write([tool, *run2, *globex])  # a different batch repeating ``tool``
    sink.close()
    assert len(_objects(s3_url)) == 3

    everything = read_records(s3_url)
    assert len(everything) == 5
    assert len({r.record_id for r in everything}) == 5
    assert read_records(s3_url, run_id="run-1", node_type="MODEL") == [model]
    assert {r.record_id for r in read_records(s3_url, run_id="run-2")} == {
        r.record_id for r in run2
    }
    assert read_records(s3_url, tenant="globex") == globex
    assert read_records(s3_url, tenant="initech") == []


def test_unknown_compression_is_refused() -> None:
    with pytest.raises(ValueError, match="compression"):
        ObjectStoreSink(object(), compression="gzip")
