"""Session restore opens protected content for a caller entitled to the tenant: ``runtrail
sessions show --resolve`` (with the content and key stores of its settings) and the session
API's ``?resolve=true`` (the token's tenant) show the content, and ``[erased]`` where its key
was destroyed; the stored snapshot itself is unchanged and still verifies, and another
tenant's token still reads nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.events import validate_json_form
from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, SESSION_SNAPSHOTS, open_store
from runtrail.privacy.reference import ERASED
from runtrail.privacy.resolve import Resolver
from runtrail.privacy.vault import ContentVault
from runtrail.sessions import AgentSession, parse_snapshot
from runtrail_services.sessions.http_api import SessionsApi
from tests.sessions_support import session_forms
from tests.test_sessions_api import get

KEPT, GONE = "KEPT-restore-7a1e", "GONE-restore-02c4"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A session of t1 whose prompts hold two subjects' references, the first subject's key
    then destroyed; the URLs of the stores, as settings."""
    env = {
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
        "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
        "RUNTRAIL_TENANT": "t1",
        "sessions": (tmp_path / "sessions").as_uri(),
    }
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, env["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, env["RUNTRAIL_KEY_STORE_URL"]),
    )
    gone, kept = vault.put("t1", "user-7", GONE), vault.put("t1", "user-8", KEPT)
    forms = session_forms(6, session="s1")
    forms[0]["data"]["prompt"]["messages"] += [str(gone), str(kept)]
    session = AgentSession("t1", "s1")
    for offset, form in enumerate(forms):
        session.apply(validate_json_form(form), source=("events", 0, offset))
    with open_store(SESSION_SNAPSHOTS, env["sessions"]) as store:
        assert store.save(session.snapshot())
    assert vault.erase("t1", "user-7").key_id is not None
    yield env
    vault.close()


def prompt_messages(document: dict[str, Any]) -> list[Any]:
    return list(document["eventLog"][0]["data"]["prompt"]["messages"][-2:])


def show(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "sessions", "show", "s1", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **{k: v for k, v in env.items() if k.startswith("RUNTRAIL_")}},
    )


def test_sessions_show_resolve_opens_content_and_marks_erased(stores: dict[str, str]) -> None:
    stored = show(stores, "--store", stores["sessions"])
    assert stored.returncode == 0, stored.stderr
    as_stored = parse_snapshot(stored.stdout.strip(), "stdout")  # still verifies
    assert KEPT not in stored.stdout and GONE not in stored.stdout

    opened = show(stores, "--store", stores["sessions"], "--resolve")
    assert opened.returncode == 0, opened.stderr
    document = json.loads(opened.stdout)
    assert prompt_messages(document) == [ERASED, KEPT]
    assert document["resolved"] is True and document["digest"] == as_stored.digest
    assert GONE not in opened.stdout


def test_the_session_api_resolves_for_the_tokens_tenant(stores: dict[str, str]) -> None:
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, stores["RUNTRAIL_CONTENT_STORE_URL"]),
        open_store(DATA_KEYS, stores["RUNTRAIL_KEY_STORE_URL"]),
    )
    store = open_store(SESSION_SNAPSHOTS, stores["sessions"])
    tokens = {"t1": "token-t1", "t2": "token-t2"}
    api = SessionsApi(store, tokens, "127.0.0.1", 0, resolver=Resolver(vault))
    api.start()
    try:
        status, body = get(api, "/v1/sessions/s1?resolve=true", "token-t1")
        assert status == 200
        document = json.loads(body)
        assert prompt_messages(document) == [ERASED, KEPT] and document["resolved"] is True
        status, body = get(api, "/v1/sessions/s1", "token-t1")  # as stored: verifiable
        assert status == 200 and KEPT.encode() not in body
        assert parse_snapshot(body, "response").digest == document["digest"]
        status, body = get(api, "/v1/sessions/s1?resolve=true", "token-t2")
        assert status == 404 and KEPT.encode() not in body
    finally:
        api.stop()
        api.resolver.close()
        store.close()
