"""The running audit service serves its transparency log over HTTP when told to
(``RUNTRAIL_AUDIT_LOG_HTTP_ENABLED``, ``…_HOST``, ``…_PORT``), on the real broker.

Go's ``golang.org/x/mod/sumdb`` (``tools/tlogverify``, no runtrail code) reads the tiles the
service wrote through that API, checks the checkpoint it signed against the verifier key the
service logged, and proves a link's inclusion; the API's own inclusion proof of that link
matches. ``tests/test_audit_tlog_go.py`` holds the log's format to Go's on a store built by
hand; this holds the service's wiring: its store, its tiles, its key, its settings.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtrail.persistence.urls import sqlite_url
from runtrail_tools.kafka.ports import free_ports
from tests.support import ServiceProcess, create_topic, form, produce_forms, unique_topic, wait_for
from tests.test_audit_tlog_go import tlogverify

pytestmark = pytest.mark.kafka

RUNS = 3
EVENTS = 300


def _served(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bytes(response.read())
    except (urllib.error.URLError, ConnectionError):
        return None


def _checkpoint_size(base: str) -> int:
    """The size line of the checkpoint the API serves (-1: none yet)."""
    note = _served(f"{base}/checkpoint")
    return int(note.decode().splitlines()[1]) if note else -1


def test_the_running_audit_service_serves_a_log_that_go_verifies(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("auditapi"), partitions=3)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=3)
    runs = [f"run-{i}" for i in range(RUNS)]
    produce_forms(
        kafka_bootstrap,
        topic,
        [form(run_id=runs[i % RUNS], sequence=i // RUNS + 1) for i in range(EVENTS)],
    )
    (port,) = free_ports(1)
    log_path = tmp_path / "audit.log"
    service = ServiceProcess(
        "audit",
        kafka_bootstrap,
        topic,
        group=f"g-{topic}",
        options={
            "store_url": sqlite_url(tmp_path / "audit.db"),
            "tiles_url": (tmp_path / "tlog").as_uri(),
            "tree_head_interval_s": "1",
            "publish": "false",
        },
        env={
            "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
            "RUNTRAIL_AUDIT_LOG_HTTP_ENABLED": "true",
            "RUNTRAIL_AUDIT_LOG_HTTP_HOST": "127.0.0.1",
            "RUNTRAIL_AUDIT_LOG_HTTP_PORT": str(port),
        },
        log_path=log_path,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _checkpoint_size(base) == EVENTS,
            90,
            what="the API serving a checkpoint of every sealed link",
        )
        found = re.search(r"tree heads every \S+, key (\S+)", log_path.read_text())
        assert found, "the service logs its verifier key at start"
        vkey = found.group(1)
        code, go, err = tlogverify("-log", base, "-vkey", vkey, "-leaf", str(EVENTS - 1))
        assert code == 0, err
        served = _served(f"{base}/v1/log/inclusion?tenant=t1&run={runs[0]}&index=0")
        assert served is not None, "no inclusion proof served"
        inclusion = json.loads(served)
        assert service.terminate() == 0
    finally:
        service.close()
    assert go["size"] == EVENTS and go["entries"] == EVENTS
    assert inclusion["treeSize"] == EVENTS
    code, go_leaf, err = tlogverify(
        "-log", (tmp_path / "tlog").as_posix(), "-vkey", vkey, "-leaf", str(inclusion["leafIndex"])
    )
    assert code == 0, err
    assert go_leaf["inclusion"] == {
        "leafIndex": inclusion["leafIndex"],
        "proof": inclusion["proof"],
    }
    assert _served(f"{base}/checkpoint") is None, "the API stops with the service"
