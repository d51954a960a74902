"""Reading a run back from the services' outputs — never from the demo's own memory.

One reader per service, each opened only when the service runs in the stack, each pointed at
the store its service writes: the location comes from the service's own settings class
(``RUNTRAIL_<NAME>_*``, else its embedded default under the state folder), exactly as the
service and its CLI resolve it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail_tools.demo.targets import Targets
from runtrail_tools.devstack.scrape import fetch


@dataclass(frozen=True)
class CaptureView:
    model_nodes: int
    tool_nodes: int
    incomplete: int
    retries: int
    duplicates: int


@dataclass(frozen=True)
class CacheView:
    model_entries: int
    tool_entries: int


@dataclass(frozen=True)
class ProjectionView:
    status: str | None
    version: int
    halted: bool
    halt_reason: str | None
    model_nodes: int
    tool_nodes: int
    retries: int


@dataclass(frozen=True)
class AuditView:
    links: int
    valid: bool
    reason: str | None
    first_broken_index: int | None


@dataclass(frozen=True)
class CommandsView:
    """A command-driven run in the command store: its version (= its events) and who
    granted its approvals."""

    version: int
    events: int
    granted_by: tuple[str, ...]


@dataclass(frozen=True)
class SessionView:
    session_id: str
    events: int


class Readers:
    """The open stores of the services in the stack (closed by :meth:`close`)."""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets
        self.state_dir = targets.settings.state_dir.expanduser().resolve()
        self._closers: list[Any] = []
        self._cache: Any = None
        self._projection: Any = None
        self._audit: Any = None
        self._sessions: Any = None
        self._commands: Any = None
        self._capture_url: str | None = None

    def _closing(self, store: Any) -> Any:
        self._closers.append(store)
        return store

    def close(self) -> None:
        for store in reversed(self._closers):
            with contextlib.suppress(Exception):
                store.close()
        self._closers.clear()

    # --- capture: the JSONL files (or objects) the capture service wrote ------------------------
    def capture_url(self) -> str:
        if self._capture_url is None:
            from runtrail_services.capture.settings import CaptureSettings

            self._capture_url = CaptureSettings.load().resolved_sink_url(self.state_dir)
        return self._capture_url

    def capture(self, tenant: str, run_id: str) -> CaptureView | None:
        if not self.targets.has("capture"):
            return None
        from runtrail.capture.reader import iter_records

        records = list(iter_records(self.capture_url(), run_id, None, tenant))
        nodes = {r.node_id for r in records}
        return CaptureView(
            model_nodes=sum(1 for r in records if r.node_type == "MODEL"),
            tool_nodes=sum(1 for r in records if r.node_type == "TOOL"),
            incomplete=sum(1 for r in records if r.incomplete),
            retries=sum(r.retry_count for r in records),
            duplicates=len(records) - len(nodes),
        )

    # --- resume-cache: its store, and its own lookup counters ---------------------------------
    def cache(self, tenant: str, run_id: str) -> CacheView | None:
        if not self.targets.has("resume-cache"):
            return None
        if self._cache is None:
            from runtrail.persistence import open_store
            from runtrail.persistence.kinds import RESUME_ENTRIES
            from runtrail_services.resume_cache.settings import ResumeCacheSettings

            url = ResumeCacheSettings.load().resolved_store_url(self.state_dir)
            self._cache = self._closing(open_store(RESUME_ENTRIES, url, readers=1))
        entries = [e for e in self._cache.entries(tenant) if e.run_id == run_id]
        return CacheView(
            model_entries=sum(1 for e in entries if e.kind.value == "model"),
            tool_entries=sum(1 for e in entries if e.kind.value == "tool"),
        )

    def cache_hits(self) -> float | None:
        """The resume-cache service's ``lookups_total{outcome="hit"}`` right now."""
        endpoint = self.targets.services.get("resume-cache")
        scrape = fetch(endpoint.metrics_url) if endpoint else None
        if scrape is None:
            return None
        return scrape.total("runtrail_resume_cache_lookups_total", outcome="hit") or 0.0

    # --- projector: the projection store ----------------------------------------------------
    def projection(self, tenant: str, run_id: str) -> ProjectionView | None:
        if not self.targets.has("projector"):
            return None
        if self._projection is None:
            from runtrail.persistence.kinds import PROJECTIONS
            from runtrail.persistence.registry import open_store
            from runtrail_services.projector.settings import ProjectorSettings

            url = ProjectorSettings.load().resolved_store_url(self.state_dir)
            self._projection = self._closing(open_store(PROJECTIONS, url))
        row = self._projection.get(tenant, run_id)
        if row is None:
            return ProjectionView(None, 0, False, None, 0, 0, 0)
        state = row.state
        return ProjectionView(
            status=row.status,
            version=int(row.version),
            halted=bool(row.halted),
            halt_reason=row.halt_reason,
            model_nodes=state.model_nodes if state else 0,
            tool_nodes=state.tool_nodes if state else 0,
            retries=state.model_retries if state else 0,
        )

    # --- audit: the link store ------------------------------------------------------------------
    def audit_store(self) -> Any:
        if self._audit is None:
            from runtrail.persistence.kinds import AUDIT_LINKS
            from runtrail.persistence.registry import open_store
            from runtrail_services.audit.settings import AuditSettings

            url = AuditSettings.load().resolved_store_url(self.state_dir)
            self._audit = self._closing(open_store(AUDIT_LINKS, url))
        return self._audit

    def audit(self, tenant: str, run_id: str) -> AuditView | None:
        if not self.targets.has("audit"):
            return None
        from runtrail.audit.store import verify_stored

        result = verify_stored(self.audit_store(), tenant, run_id)
        return AuditView(result.length, result.valid, result.reason, result.first_broken_index)

    # --- sessions: the session store --------------------------------------------------------
    def session(self, tenant: str, session_id: str) -> SessionView | None:
        if not self.targets.has("sessions"):
            return None
        if self._sessions is None:
            from runtrail.persistence import open_store
            from runtrail.persistence.kinds import SESSION_SNAPSHOTS
            from runtrail_services.sessions.settings import SessionsSettings

            url = SessionsSettings.load().resolved_store_url(self.state_dir)
            self._sessions = self._closing(open_store(SESSION_SNAPSHOTS, url))
        snapshot = self._sessions.load(tenant, session_id)
        return SessionView(session_id, 0 if snapshot is None else len(snapshot.event_log))

    # --- command-api (and its outbox relay): the command store ---------------------------------
    def command_store(self) -> Any:
        if self._commands is None:
            from runtrail.persistence import COMMAND_EVENTS, open_store
            from runtrail_services.command_api.settings import CommandApiSettings

            url = CommandApiSettings.load().resolved_store(self.state_dir)
            self._commands = self._closing(open_store(COMMAND_EVENTS, url))
        return self._commands

    def commands(self, tenant: str, run_id: str) -> CommandsView | None:
        if not self.targets.has("command-api"):
            return None
        store = self.command_store()
        version, _ = store.load(tenant, run_id)
        events = store.events(tenant, run_id)
        grants = tuple(str(e.data.approved_by) for e in events if e.type == "run.approval_granted")
        return CommandsView(int(version), len(events), grants)

    def outbox_pending(self) -> int:
        """Events of the command store not yet on the events topic (0 without a command API)."""
        if not self.targets.has("command-api"):
            return 0
        return int(self.command_store().outbox_size())


@contextlib.contextmanager
def open_readers(targets: Targets) -> Iterator[Readers]:
    opened = Readers(targets)
    try:
        yield opened
    finally:
        opened.close()


def ledger_path(workdir: Path) -> Path:
    return workdir / "side-effects.tsv"
