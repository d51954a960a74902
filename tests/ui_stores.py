"""Stores for explorer tests that need no broker: runs written straight into the SQLite stores
a stack's services keep under its state folder, with the services' own libraries (events
sealed into the audit store, projected by the pure projector, a tree head signed with the
audit service's key), and an explorer process of its own serving them.

The full pipeline (publisher → broker → services → stores) is what ``test_ui_browser.py``
drives; these tests hold the explorer to what the stores say, so they build the stores
directly and start in seconds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from runtrail.audit.link import genesis_head, seal
from runtrail.events import Event
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection.replaying import replay
from runtrail.projection.store import ProjectionBatch
from runtrail_services.audit.settings import AuditSettings
from runtrail_services.audit.signing import load_or_create_signer
from runtrail_services.audit.tree_heads import sign_and_store
from tests.projection_support import Run
from tests.ui_support import explorer, ui_env

#: A port nothing listens on: the explorer renders pages without live updates.
NO_BROKER = "127.0.0.1:1"


class SeededRun(Protocol):
    """A run's events, as ``tests.projection_support.Run`` builds them (or a command API
    wrote them)."""

    tenant: str
    run_id: str
    events: list[Event]


def small_run(run_id: str, tenant: str) -> Run:
    """A run of three events (accepted, one model request and its response) of ``tenant``."""
    run = Run(run_id, tenant)
    run.add("run.accepted", {"goalRef": "goal://1", "policyVersion": "p-1"})
    run.add("MODEL_REQUEST", {"prompt": {"model": "m"}}, turn_id="turn-1", step=1)
    run.add("MODEL_RESPONSE", {"message": "done", "raw": None}, turn_id="turn-1", step=1)
    return run


def seed(state_dir: Path, runs: Iterable[SeededRun]) -> None:
    """Seal and project each run's events into ``state_dir``'s audit and projection stores."""
    audit = open_store(AUDIT_LINKS, sqlite_url(state_dir / "audit.db"))
    projections = open_store(PROJECTIONS, sqlite_url(state_dir / "projection.db"))
    try:
        for run in runs:
            head = genesis_head(run.tenant, run.run_id)
            links = []
            for event in run.events:
                link = seal(head.length, head.hash, event.json_form())
                links.append(link)
                head = type(head)(run.tenant, run.run_id, head.length + 1, link.hash)
            audit.append_batch(links, {})
            projections.apply_batch(ProjectionBatch(projections=[replay(run.events)]))
    finally:
        audit.close()
        projections.close()


def sign_tree_head(state_dir: Path) -> None:
    """A tree head of every head, signed with the key the audit service would use there."""
    settings = AuditSettings()
    signer = load_or_create_signer(settings.resolved_key_path(state_dir), settings.key_name)
    audit = open_store(AUDIT_LINKS, sqlite_url(state_dir / "audit.db"))
    try:
        sign_and_store(audit, signer, settings.origin)
    finally:
        audit.close()


@contextmanager
def serving(
    state_dir: Path, tokens: dict[str, str], log: Path, *flags: str, **env: str
) -> Iterator[str]:
    """``runtrail ui`` on ``state_dir`` with these tokens and no broker; yields its URL."""
    environment = ui_env(state_dir)
    environment["RUNTRAIL_UI_TOKENS"] = json.dumps(tokens)
    environment.update(env)
    with explorer(state_dir, environment, "--bootstrap-servers", NO_BROKER, *flags, log=log) as url:
        yield url


def tampered_copy(state_dir: Path, target: Path, tenant: str, run_id: str) -> int:
    """A copy of the audit store with one sealed event edited behind the store's back (its
    stored hash kept, as a forger without the chain would); the index of the edited link."""
    source = sqlite3.connect(state_dir / "audit.db")
    copy = sqlite3.connect(target)
    source.backup(copy)
    source.close()
    rows = copy.execute(
        "SELECT idx, event FROM audit_links WHERE tenant_id = ? AND run_id = ? ORDER BY idx",
        (tenant, run_id),
    ).fetchall()
    index, text = rows[len(rows) // 2]
    event = json.loads(text)
    event["data"] = {**event["data"], "tampered": "mallory"}
    copy.execute("DROP TRIGGER audit_links_no_update")
    copy.execute(
        "UPDATE audit_links SET event = ? WHERE tenant_id = ? AND run_id = ? AND idx = ?",
        (json.dumps(event, separators=(",", ":")), tenant, run_id, index),
    )
    copy.commit()
    copy.close()
    return int(index)
