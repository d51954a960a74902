"""Capture's disk full (a 3 MB tmpfs) or read-only: the process stays up, not ready, and loses
nothing.

``runtrail run capture`` runs as a real child process against the real broker, its JSONL sink
on a tmpfs of its own. While the disk refuses writes, ``/readyz`` answers 503, the process keeps
its PID and nothing is committed past what is on disk; once the tmpfs is grown again (or made
writable), every record is on disk exactly once, every line complete, and all is committed.
Needs root (mount); tests run as root here.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtrail.capture.file_sink import JsonlFileSink
from runtrail.capture.repair import capture_files
from runtrail.runtime.unavailable import StoreUnavailable
from tests.capture_support import RunEvents, prompt, sample_records
from tests.kafka_fixture import services_required
from tests.support import ServiceProcess, create_topic, produce_forms, unique_topic, wait_for
from tests.test_capture_service_kafka import (
    NO_EXPIRY,
    PARTITIONS,
    all_committed,
    capture,
    file_lines,
    reference,
)

pytestmark = [pytest.mark.kafka]


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, always unmounted afterwards."""
    if os.geteuid() != 0:
        message = "mounting a tmpfs needs root"
        if services_required():  # CI runs as root: a full-disk test never silently skips there
            pytest.fail(f"{message} (RUNTRAIL_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(message)
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def readyz(proc: ServiceProcess) -> int:
    url = f"http://127.0.0.1:{proc.metrics_port()}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def big_runs(runs: int, steps: int, answer_bytes: int) -> list[dict[str, Any]]:
    """MODEL nodes with large answers, interleaved over runs (so over partitions)."""
    per_run: list[list[dict[str, Any]]] = []
    for r in range(runs):
        run = RunEvents(run_id=f"run-{r}-{time.time_ns()}", tenant="acme", session=None)
        forms: list[dict[str, Any]] = []
        for step in range(1, steps + 1):
            answer = f"{r}/{step} " + "x" * answer_bytes
            raw = {"id": f"r{step}", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
            forms.append(run.form("MODEL_REQUEST", {"prompt": prompt()}, step=step))
            forms.append(run.form("MODEL_RESPONSE", {"message": answer, "raw": raw}, step=step))
            forms.append(run.form("STEP_END", {"reason": "done"}, step=step))
        per_run.append(forms)
    return [f for group in zip(*per_run, strict=True) for f in group]


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("capture-disk"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=PARTITIONS)
    return name


def check_files(root: Path, expected: dict[str, bytes]) -> None:
    for path in capture_files(root):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path} ends in a partial line"
    lines = file_lines(root)
    assert sorted(lines) == sorted(expected.values())  # nothing missing, extra or doubled
    assert len({orjson.loads(line)["recordId"] for line in lines}) == len(lines)


def wait_not_ready_and_alive(proc: ServiceProcess, bootstrap: str, group: str, topic: str) -> None:
    wait_for(lambda: not proc.alive() or readyz(proc) == 503, 90, what="/readyz 503")
    assert proc.alive(), "capture exited on an unwritable disk"
    time.sleep(3)  # a few retries later: still up, still not ready, nothing more committed
    assert proc.alive() and readyz(proc) == 503
    assert not all_committed(bootstrap, group, topic)


def test_a_full_disk_makes_capture_wait_and_lose_nothing(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    forms = big_runs(runs=4, steps=10, answer_bytes=150_000)  # 40 records, ~6 MB on disk
    group = f"g-{topic}"
    with tmpfs(tmp_path / "disk", "3m") as root:
        proc = capture(kafka_bootstrap, topic, tmp_path, group, sink_url=root.as_uri(), **NO_EXPIRY)
        try:
            wait_for(lambda: readyz(proc) == 200, 60, what="capture ready")
            pid = proc.proc.pid
            produce_forms(kafka_bootstrap, topic, forms)
            expected = reference(kafka_bootstrap, topic, len(forms))
            assert len(expected) == 40
            wait_not_ready_and_alive(proc, kafka_bootstrap, group, topic)

            _mount("-o", "remount,size=64m", str(root))  # room again
            wait_for(lambda: all_committed(kafka_bootstrap, group, topic), 90, what="commits")
            wait_for(lambda: readyz(proc) == 200, 30, what="/readyz 200 again")
            assert proc.proc.pid == pid and proc.alive()
            assert proc.terminate() == 0
            check_files(root, expected)
            assert "unavailable" in (tmp_path / "capture.log").read_text()
        finally:
            proc.close()


def test_a_read_only_folder_makes_capture_wait_and_lose_nothing(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    forms = big_runs(runs=3, steps=4, answer_bytes=1000)
    group = f"g-{topic}"
    with tmpfs(tmp_path / "disk", "64m") as root:
        proc = capture(kafka_bootstrap, topic, tmp_path, group, sink_url=root.as_uri(), **NO_EXPIRY)
        try:
            wait_for(lambda: readyz(proc) == 200, 60, what="capture ready")
            _mount("-o", "remount,ro", str(root))
            produce_forms(kafka_bootstrap, topic, forms)
            expected = reference(kafka_bootstrap, topic, len(forms))
            wait_not_ready_and_alive(proc, kafka_bootstrap, group, topic)

            _mount("-o", "remount,rw", str(root))
            wait_for(lambda: all_committed(kafka_bootstrap, group, topic), 90, what="commits")
            wait_for(lambda: readyz(proc) == 200, 30, what="/readyz 200 again")
            assert proc.terminate() == 0
            check_files(root, expected)
            for path in capture_files(root):  # created private
                assert path.stat().st_mode & 0o777 == 0o600
                assert path.parent.stat().st_mode & 0o777 == 0o700
        finally:
            proc.close()


def test_the_file_sink_continues_a_line_cut_by_a_full_disk(tmp_path: Path) -> None:
    """In process, no broker: the disk fills in the middle of a line; the retried flush writes
    only the rest of it, so the file holds every line once, complete."""
    records = [r for _ in range(300) for r in sample_records()]  # ids repeat: lines, not records
    with tmpfs(tmp_path / "disk", "64k") as root:
        sink = JsonlFileSink(root, buffer_bytes=1)  # every line goes to the kernel at once
        sink.write(records)  # never raises, however full the disk is
        with pytest.raises(StoreUnavailable, match="No space left"):
            sink.flush()
        assert sink.errors >= 1
        _mount("-o", "remount,size=4m", str(root))
        sink.flush()
        sink.close()
        (path,) = list(capture_files(root))
        data = path.read_bytes()
        assert data == b"".join(r.to_json_line() for r in records)
        assert path.stat().st_mode & 0o777 == 0o600
