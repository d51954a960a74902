"""The session API: bearer tokens decide the tenant; another tenant's session answers 404."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.sessions import parse_snapshot
from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.sessions.http_api import SessionsApi
from tests.sessions_support import built_snapshot

TOKENS = {"acme": "token-acme", "globex": "token-globex"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[SessionsApi]:
    store = FileSessionStore(tmp_path / "sessions")
    store.save(built_snapshot(12, tenant="acme", session="s-acme"))
    store.save(built_snapshot(8, tenant="acme", session="shared id"))
    store.save(built_snapshot(5, tenant="globex", session="s-globex"))
    store.save(built_snapshot(6, tenant="globex", session="shared id"))
    server = SessionsApi(store, TOKENS, "127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


def get(api: SessionsApi, path: str, token: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{api.port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_tenant_reads_its_own_sessions(api: SessionsApi) -> None:
    status, body = get(api, "/v1/sessions/s-acme", "token-acme")
    assert status == 200
    snapshot = parse_snapshot(body, "response")  # the client can verify the digest
    assert (snapshot.tenant_id, snapshot.session_id, snapshot.revision) == ("acme", "s-acme", 12)
    status, body = get(api, "/v1/sessions/shared%20id", "token-globex")
    assert status == 200 and parse_snapshot(body, "response").tenant_id == "globex"
    status, body = get(api, "/v1/sessions", "token-acme")
    assert status == 200
    listed = json.loads(body)
    assert listed["tenantId"] == "acme"
    assert [s["sessionId"] for s in listed["sessions"]] == ["s-acme", "shared id"]


def test_cross_tenant_reads_answer_404(api: SessionsApi) -> None:
    cross = get(api, "/v1/sessions/s-globex", "token-acme")
    assert cross[0] == 404
    assert get(api, "/v1/sessions/s-acme", "token-globex")[0] == 404
    missing = get(api, "/v1/sessions/does-not-exist", "token-acme")
    assert missing[0] == 404  # indistinguishable from another tenant's session
    assert json.loads(cross[1])["error"] == json.loads(missing[1])["error"]
    listed = json.loads(get(api, "/v1/sessions", "token-globex")[1])
    assert "s-acme" not in [s["sessionId"] for s in listed["sessions"]]


def test_without_a_valid_token_nothing_is_answered(api: SessionsApi) -> None:
    for token in (None, "", "token-acmE", "token-acme-extra"):
        assert get(api, "/v1/sessions/s-acme", token)[0] == 401
    assert get(api, "/v1/sessions", None)[0] == 401
    assert get(api, "/v1/other", "token-acme")[0] == 404


def test_no_tokens_configured_fails_closed(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "sessions")
    store.save(built_snapshot(3))
    server = SessionsApi(store, {}, "127.0.0.1", 0)
    server.start()
    try:
        assert get(server, "/v1/sessions/s1", "anything")[0] == 401
    finally:
        server.stop()
