"""The resume-cache service's read-your-writes wait as users bound it:
``RUNTRAIL_RESUME_CACHE_WAIT_TIMEOUT_MS`` in the environment of ``runtrail run resume-cache``.
(Lookups that wait and are answered once the service catches up: test_resume_cache_*.py.)"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.persistence.urls import sqlite_url
from runtrail.runtime import ServiceContext
from runtrail_services.resume_cache.service import ResumeCacheService

TOKEN = "acme-token-0123456789"


def _ask(url: str) -> tuple[int, dict[str, object], float]:
    """Status, body and seconds of one lookup (a client that gives up after 5 s fails)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except TimeoutError:
        status, body = 0, b'{"error": "no answer within 5 s"}'
    return status, json.loads(body), time.monotonic() - started


def test_wait_timeout_from_the_environment_bounds_a_lookup_of_a_service_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_RESUME_CACHE_WAIT_TIMEOUT_MS=400``, a lookup naming an offset the service
    has not consumed answers 503 "not caught up" after about 0.4 s, whether it asks for no
    wait of its own or for a longer one (``wait_ms=60000``: capped by the setting). If the
    service ignored the variable, each such lookup would hold its client (an agent about to
    resume, and one of the API's threads) for the default 10 s: an operator who lowered it
    for agents that would rather re-run a step than wait would see no change."""
    monkeypatch.setenv("RUNTRAIL_RESUME_CACHE_WAIT_TIMEOUT_MS", "400")
    monkeypatch.setenv("RUNTRAIL_RESUME_CACHE_TOKENS", json.dumps({"acme": TOKEN}))
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state", events_topic="events"),
        options={
            "http_port": "0",
            "store_url": sqlite_url(tmp_path / "cache.db"),
            "publish_topic": "false",
        },
    )
    service = ResumeCacheService(context)
    try:
        base = f"http://127.0.0.1:{service.http.port}/v1/tenants/acme"
        key = "ab" * 32
        for path in (
            "/runs/run-1?offsets=0:100",
            "/runs/run-1?offsets=0:100&wait_ms=60000",
            f"/entries/tool/{key}?run=run-1&offsets=0:100",
            f"/entries/tool/{key}?run=run-1&offsets=0:100&wait_ms=60000",
        ):
            status, body, took = _ask(base + path)
            assert (status, body.get("error")) == (503, "not caught up"), (path, body)
            assert 0.35 <= took < 3, (path, took)
        # caught up (no offsets named): answered at once, the bound is no delay of its own
        status, body, took = _ask(f"{base}/runs/run-1")
        assert status == 200 and took < 2, (body, took)
    finally:
        service.close()
