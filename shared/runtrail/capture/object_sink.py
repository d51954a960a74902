"""Object-store sink: each batch becomes one immutable JSONL object (optionally zstd).

An object is named ``<tenant>/<yyyy-mm-dd>/capture-<sha256 of its sorted recordIds>.jsonl``
(``.jsonl.zst`` compressed), so uploading the same batch again after a crash overwrites the
object instead of adding a copy. Batches that differ (different flush timing after a restart)
may repeat a record in two objects; readers de-duplicate by recordId.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from typing import Any

import obstore
import obstore.exceptions

from runtrail.capture.layout import partition_dir
from runtrail.capture.record import NodeIoRecord
from runtrail.extras import require
from runtrail.persistence.object_store import open_object_store
from runtrail.persistence.url_options import pop_int, split_options
from runtrail.runtime.unavailable import StoreUnavailable

DEFAULT_BATCH_BYTES = 8 * 1024 * 1024
COMPRESSIONS = ("none", "zstd")


def object_key(tenant_seg: str, day: str, record_ids: Sequence[str], compressed: bool) -> str:
    """The deterministic key of a batch: same recordIds, same key."""
    digest = hashlib.sha256("\n".join(sorted(record_ids)).encode()).hexdigest()
    suffix = ".jsonl.zst" if compressed else ".jsonl"
    return f"{tenant_seg}/{day}/capture-{digest}{suffix}"


class _Batch:
    __slots__ = ("lines", "size")

    def __init__(self) -> None:
        self.lines: dict[str, bytes] = {}  # recordId -> line; a record once per object
        self.size = 0


class ObjectStoreSink:
    """The ``s3://bucket/prefix`` sink (and every other obstore back end)."""

    def __init__(
        self,
        store: Any,
        *,
        compression: str = "none",
        zstd_level: int = 3,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
        #: zstandard when compressing: asked for here, so a missing one fails at open, not
        #: at the first upload
        self._zstd = require("zstandard", "compression=zstd") if compression == "zstd" else None
        self.store = store
        self.compressed = compression == "zstd"
        self.zstd_level = zstd_level
        self.batch_bytes = batch_bytes
        self._batches: dict[tuple[str, str], _Batch] = {}
        self._pending = 0
        self._closed = False
        #: Keys of the objects this sink uploaded, in order (for metrics and tests).
        self.uploaded: list[str] = []

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ObjectStoreSink:
        """``s3://bucket/prefix?compression=zstd&zstd_level=…&batch_bytes=…&<store options>``."""
        base, options = split_options(url, overrides)
        compression = str(options.pop("compression", "none") or "none")
        zstd_level = pop_int(options, "zstd_level", 3)
        batch_bytes = pop_int(options, "batch_bytes", DEFAULT_BATCH_BYTES)
        store = open_object_store(base, options)
        return cls(store, compression=compression, zstd_level=zstd_level, batch_bytes=batch_bytes)

    # --- CaptureSink ------------------------------------------------------------------------
    def write(self, records: Sequence[NodeIoRecord]) -> None:
        if self._closed:
            raise ValueError("sink is closed")
        for record in records:
            key = partition_dir(record)
            batch = self._batches.get(key)
            if batch is None:
                batch = self._batches[key] = _Batch()
            if record.record_id in batch.lines:
                continue
            line = record.to_json_line()
            batch.lines[record.record_id] = line
            batch.size += len(line)
            self._pending += len(line)
        if self._pending >= self.batch_bytes:
            with contextlib.suppress(StoreUnavailable):  # write never fails: flush reports it
                self.flush()

    def flush(self) -> None:
        """Upload every buffered batch; a failed upload stays buffered for the next flush."""
        for key in list(self._batches):
            batch = self._batches[key]
            try:
                self._upload(key, batch)
            except (OSError, obstore.exceptions.BaseError) as exc:
                # the store is down or refuses writes: the runtime reports not ready, commits
                # nothing and retries; the batch stays buffered (its object key is stable)
                raise StoreUnavailable("capture sink (object store)", str(exc)) from exc
            del self._batches[key]
            self._pending -= batch.size

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True

    def _upload(self, key: tuple[str, str], batch: _Batch) -> None:
        body = b"".join(batch.lines.values())
        if self._zstd is not None:
            body = self._zstd.ZstdCompressor(level=self.zstd_level).compress(body)
        path = object_key(key[0], key[1], list(batch.lines), self.compressed)
        obstore.put(self.store, path, body)
        self.uploaded.append(path)
