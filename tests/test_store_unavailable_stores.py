"""A full disk under the sessions file store and the resume-cache SQLite store: the service
waits (``StoreUnavailable`` from flush, offsets held), never crashes, and loses nothing.

Each store lives on a small tmpfs of its own, filled to the last byte by a filler file; the
service processes events as the runtime drives it; then the filler is removed and the same
flush succeeds with everything stored once. Needs root (mount); tests run as root here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.runtime import ServiceContext
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.resume_cache.service import ResumeCacheService
from runtrail_services.sessions.service import SessionsService
from tests.checkpoint_support import held
from tests.sessions_support import session_forms
from tests.support import create_topic, unique_topic
from tests.test_outage_output_topics import delivered, expected_entries, read_topic
from tests.test_store_unavailable_capture import tmpfs

pytestmark = [pytest.mark.kafka]


def fill(folder: Path) -> Path:
    """Write a filler file until the file system is full; returns it (delete it to free)."""
    filler = folder / "filler"
    chunk = b"\0" * 4096
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as handle:
        while True:
            handle.write(chunk)
    return filler


def context(
    tmp_path: Path, bootstrap: str, options: dict[str, str], **settings: Any
) -> ServiceContext:
    return ServiceContext(
        settings=Settings(
            bootstrap_servers=bootstrap, events_topic="events", state_dir=tmp_path, **settings
        ),
        options=options,
        registry=CollectorRegistry(),
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "1m") as root:
        yield root


def test_sessions_file_store_on_a_full_disk_waits_and_loses_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    store_root = small_disk / "sessions"
    svc = SessionsService(
        context(
            tmp_path,
            "127.0.0.1:1",
            {
                "http_enabled": "false",
                "publish_pointers": "false",
                "every_n_events": "5",
                "store_url": store_root.as_uri(),
            },
        )
    )
    forms = session_forms(30, payload=20_000)  # each snapshot grows past what is left
    try:
        filler = fill(small_disk)
        svc.process(delivered(forms, 0))  # saves due on the way fail: no crash
        with pytest.raises(StoreUnavailable, match="session store"):
            svc.flush()
        assert held(svc, flush=False) == {("events", 0): 0}  # nothing may be committed
        filler.unlink()
        svc.flush()
        assert held(svc, flush=False) == {}
        stored = FileSessionStore(store_root).load("t1", "s1")
        assert stored is not None and stored.revision == 30
    finally:
        svc.close()


def test_resume_cache_sqlite_store_on_a_full_disk_waits_and_loses_nothing(
    tmp_path: Path, small_disk: Path, kafka_bootstrap: str
) -> None:
    cache_topic = create_topic(
        kafka_bootstrap, unique_topic("cache"), partitions=1, **{"cleanup.policy": "compact"}
    )
    svc = ResumeCacheService(
        context(
            tmp_path,
            kafka_bootstrap,
            {
                "http_port": "0",
                "tokens": '{"tok": "t1"}',
                "store_url": f"sqlite://{small_disk / 'cache.db'}",
            },
            resume_cache_topic=cache_topic,
        )
    )
    forms = session_forms(60, payload=30_000)
    try:
        filler = fill(small_disk)
        svc.process(delivered(forms, 0))
        svc.context.checkpoint.reached({("events", 0): len(forms)})  # as the runtime does
        with pytest.raises(StoreUnavailable, match="resume-cache store"):
            svc.flush()
        assert svc.store.offsets("events") == {}  # the store took nothing
        with pytest.raises(StoreUnavailable):
            svc.flush()  # the retry fails the same way, the topic records are not sent again
        filler.unlink()
        svc.flush()
        assert svc.store.offsets("events") == {0: 60}
        stored = {(e.tenant_id, e.run_id, e.kind, e.key) for e in svc.store.entries()}
        records = read_topic(kafka_bootstrap, cache_topic)
    finally:
        svc.close()
    expected = expected_entries(forms)
    assert len(stored) == len(expected)
    data = [(k, v) for k, v, _ in records if k is not None and not k.startswith(b'["position"')]
    assert len(data) == len(set(data)), "a cache record was sent twice by the retries"
    assert {k for k, _ in data if k.startswith(b'["entry"')} == expected
