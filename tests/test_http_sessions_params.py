"""The session API's request parts over real HTTP: an encoded session ID that tries to climb
into another tenant's folder, and the ``resolve`` flag with a value it does not know (which
was silently read as "false": the user asked for the content and got references without a
word).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.sessions.http_api import SessionsApi
from tests.resume_support import get
from tests.sessions_support import built_snapshot

TOKENS = {"acme": "token-acme", "globex": "token-globex"}


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    store = FileSessionStore(tmp_path / "sessions")
    store.save(built_snapshot(3, tenant="acme", session="s-acme"))
    store.save(built_snapshot(5, tenant="globex", session="s-globex"))
    server = SessionsApi(store, TOKENS, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.mark.parametrize(
    "session",
    [
        "..%2Fglobex%2Fs-globex",
        "..%2F..%2Fsessions%2Fglobex%2Fs-globex",
        "%2E%2E%2Fglobex%2Fs-globex",
        "s-globex",
    ],
)
def test_an_encoded_session_id_cannot_reach_another_tenant(base: str, session: str) -> None:
    """A session ID holding ``../`` (percent-encoded past the route's ``/`` check) must not
    open another tenant's snapshot: it answers the 404 of a session that does not exist."""
    status, body = get(f"{base}/v1/sessions/{session}", "token-acme")
    assert (status, body) == (404, {"error": "no such session", "sessionId": unquote(session)})


@pytest.mark.parametrize("value", ["yes", "on", "2", "tru"])
def test_an_unknown_resolve_value_is_a_400_naming_it(base: str, value: str) -> None:
    """``resolve=yes`` used to answer the stored references as if resolve were false: the user
    who asked for the content got none and no sign why."""
    status, body = get(f"{base}/v1/sessions/s-acme?resolve={value}", "token-acme")
    assert status == 400, (value, status, body)
    assert "resolve" in body["error"]


@pytest.mark.parametrize(("value", "resolved"), [("true", True), ("1", True), ("TRUE", True),
                                                 ("false", False), ("0", False), ("", False)])  # fmt: skip
def test_known_resolve_values_still_answer(base: str, value: str, resolved: bool) -> None:
    """The documented values keep working: ``true``/``1`` resolve, ``false``/``0``/empty not."""
    status, body = get(f"{base}/v1/sessions/s-acme?resolve={value}", "token-acme")
    assert status == 200, (value, body)
    assert bool(body.get("resolved")) is resolved
