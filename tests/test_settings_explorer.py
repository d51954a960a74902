"""Where the explorer reads, as users set it: the five ``RUNTRAIL_UI_*_STORE_URL`` variables
and ``RUNTRAIL_UI_CAPTURE_SINK_URL`` in the environment of ``runtrail ui``. (The explorer
on the state folder's default stores: test_ui_*.py; the prune log it reads, configured:
test_settings_prune_log.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from runtrail.persistence import (
    CAPTURE_RECORDS,
    COMMAND_EVENTS,
    RESUME_ENTRIES,
    SESSION_SNAPSHOTS,
    open_store,
)
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.entry import CacheEntry
from runtrail.resume.keys import Kind
from tests.capture_support import tool_records
from tests.commands_support import command
from tests.projection_support import full_run
from tests.sessions_support import built_snapshot
from tests.ui_stores import seed, serving
from tests.ui_support import get_page

TENANT = "acme"
TOKENS = {TENANT: "acme-token-0123456789"}
RUN = "run-elsewhere"
KEY = "ab" * 32


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_explorer_reads_every_store_from_the_url_the_environment_names(
    tmp_path: Path,
) -> None:
    """With the six ``RUNTRAIL_UI_*`` store and sink URLs set (SQLite files and folders outside the
    state folder, as a deployment points the explorer at shared PostgreSQL and S3), the
    explorer lists the run from the projection store, exports its chain from the audit store,
    shows its captured node from the capture sink, its cache entry from the resume-cache store,
    its session's snapshot from the session store and its refused command from the command
    store; and the state folder stays empty (nothing read or created there). If one URL were
    ignored, the explorer would open the state folder's default instead (for a SQLite store,
    creating an empty file there) and show that section empty, without a word: an operator would read
    "no cache entries" or "no refusals" of a run that has them."""
    state, shared = tmp_path / "state", tmp_path / "shared"
    state.mkdir()
    shared.mkdir()
    run = full_run(RUN, TENANT)  # its events carry session sess-1
    seed(shared, [run])  # shared/audit.db and shared/projection.db

    sink_url = (shared / "capture").as_uri()
    sink = open_store(CAPTURE_RECORDS, sink_url)
    try:
        [record] = tool_records(1, run_id=RUN, tenant=TENANT)
        sink.write([record])
    finally:
        sink.close()

    cache_url = sqlite_url(shared / "cache.db")
    cache = open_store(RESUME_ENTRIES, cache_url)
    try:
        entry = CacheEntry(
            TENANT, RUN, Kind.TOOL, KEY, {"sent": 1}, 2, "turn-1", "c1", "send_email"
        )
        assert cache.import_entries([entry]) == 1
    finally:
        cache.close()

    sessions_url = (shared / "sessions").as_uri()
    sessions = open_store(SESSION_SNAPSHOTS, sessions_url)
    try:
        snapshot = built_snapshot(6, tenant=TENANT, session="sess-1")
        assert sessions.save(snapshot)
    finally:
        sessions.close()

    commands_url = sqlite_url(shared / "commands.db")
    commands = open_store(COMMAND_EVENTS, commands_url)
    try:
        outcome = commands.execute(command("cancel_run", RUN, 7, {}, tenant=TENANT))
        assert not outcome.accepted and outcome.code == "stale", outcome
    finally:
        commands.close()

    env = {
        "RUNTRAIL_UI_PROJECTION_STORE_URL": sqlite_url(shared / "projection.db"),
        "RUNTRAIL_UI_AUDIT_STORE_URL": sqlite_url(shared / "audit.db"),
        "RUNTRAIL_UI_CAPTURE_SINK_URL": sink_url,
        "RUNTRAIL_UI_RESUME_CACHE_STORE_URL": cache_url,
        "RUNTRAIL_UI_SESSIONS_STORE_URL": sessions_url,
        "RUNTRAIL_UI_COMMAND_STORE_URL": commands_url,
        # the two stores the run page reads that are not the explorer's own settings
        "RUNTRAIL_PRUNE_LOG_URL": sqlite_url(shared / "prunes.db"),
        "RUNTRAIL_OTLP_DROPS_STORE_URL": sqlite_url(shared / "drops.db"),
    }
    with serving(state, TOKENS, tmp_path / "ui.log", **env) as url:
        listing = get_page(f"{url}/runs", TOKENS[TENANT])
        page = get_page(f"{url}/runs/{RUN}", TOKENS[TENANT])
        chain = get_page(f"{url}/runs/{RUN}/export.jsonl", TOKENS[TENANT]).splitlines()
        node = json.loads(get_page(f"{url}/runs/{RUN}/nodes/{record.record_id}", TOKENS[TENANT]))
    assert RUN in listing  # projection store
    assert len(chain) == len(run.events)  # audit store
    assert [json.loads(line)["event"]["eventId"] for line in chain] == [
        e.event_id for e in run.events
    ]
    assert node == {"inputs": record.inputs, "outputs": record.outputs}  # capture sink
    assert f'id="node-{record.record_id}"' in page
    assert '<b id="cache-count">1</b>' in page and KEY[:12] in page  # resume-cache store
    assert f'<code class="digest">{snapshot.digest}</code>' in page  # session store
    assert '<span id="refusal-count">1</span>' in page and 'data-code="stale"' in page
    assert _files(state) == [], "the explorer read or created stores in the state folder"
