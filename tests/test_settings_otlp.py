"""Where OTLP ingest counts what it did not record, as users set it:
``RUNTRAIL_OTLP_DROPS_STORE_URL`` in the environment of the receiver and of
``runtrail otlp drops``. (The drops themselves, in the default store under the state folder:
test_otlp_ingest.py.)"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.persistence import open_store
from runtrail.persistence.kinds import OTLP_DROPS
from runtrail_services.otlp_ingest.service import OtlpIngestReceiver
from runtrail_tools.cli.main import main
from tests.projector_support import sqlite_url
from tests.support import create_topic, unique_topic, wait_for

TOKEN = "token-acme-0123456789"
TRACE = "5b8efff798038103d269b633813fc60c"


def _span(span_id: str, name: str, attrs: dict[str, str]) -> dict[str, object]:
    return {
        "traceId": TRACE,
        "spanId": span_id,
        "parentSpanId": "a" * 16,
        "name": name,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000100000000",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_drops_go_to_the_store_the_environment_names_and_are_listed_from_it(
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With ``RUNTRAIL_OTLP_DROPS_STORE_URL`` set, a receiver's drops (a span that is no GenAI
    operation) are counted in that store, nothing in the default one under the state folder,
    and ``runtrail otlp drops`` lists them from it. If the receiver ignored the variable, the
    counts would land in the state folder's file, which the explorer and the CLI (reading the
    configured store, a shared database in production) never see: the drops silently unrecorded."""
    elsewhere = tmp_path / "shared" / "drops.db"
    elsewhere.parent.mkdir()
    monkeypatch.setenv("RUNTRAIL_OTLP_DROPS_STORE_URL", sqlite_url(elsewhere))
    state = tmp_path / "state"
    topic = create_topic(kafka_bootstrap, unique_topic("otlp-drops"), partitions=1)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        spool_dir=tmp_path / "spool",
        state_dir=state,
    )
    receiver = OtlpIngestReceiver(
        settings, options={"http_port": "0", "tokens": json.dumps({"acme": TOKEN})}, metrics_port=0
    )
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: receiver.health.ready, 30, what="receiver ready")
        body = json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    _span("ccc19b7ec3c1b174", "GET /", {"http.method": "GET"}),
                                    _span("ddd19b7ec3c1b174", "SELECT", {"db.system": "sqlite"}),
                                ]
                            }
                        ]
                    }
                ]
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{receiver.port}/v1/traces",
            data=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
        except urllib.error.HTTPError as exc:  # pragma: no cover - shown on failure
            raise AssertionError(f"{exc.code}: {exc.read()!r}") from None
    finally:
        receiver.request_stop()
        thread.join(30)
    assert not (state / "otlp-drops.db").exists(), "drops written to the default store"
    store = open_store(OTLP_DROPS, sqlite_url(elsewhere))
    try:
        assert {(r.reason, r.count) for r in store.rows(tenant="acme")} == {("not-genai", 2)}
    finally:
        store.close()
    capsys.readouterr()
    assert main(["otlp", "drops", "--json", "--state-dir", str(state)]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["runId"], r["reason"], r["count"]) for r in listed] == [(TRACE, "not-genai", 2)]
