"""The one place the explorer opens the services' stores, through their public openers.

Each store is located as its service locates it (the service's settings class, else the
embedded default under the state folder) unless :class:`UiSettings` names another URL, and is
opened once, lazily, on first use: a service that is not deployed only empties its section.
Every opener the explorer calls is called here, so moving to a shared opener registry is a
change of this module alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from runtrail.audit.store import LinkStore
from runtrail.commands.store import EventStore
from runtrail.config import Settings
from runtrail.drops.store import SqlDropStore
from runtrail.persistence.kinds import (
    AUDIT_LINKS,
    COMMAND_EVENTS,
    OTLP_DROPS,
    PROJECTIONS,
    PRUNE_LOG,
    RESUME_ENTRIES,
    SESSION_SNAPSHOTS,
)
from runtrail.persistence.registry import open_store
from runtrail.privacy.prune_log import SqlPruneLog
from runtrail.privacy.resolve import Resolver, resolver_from_settings
from runtrail.projection.store import ProjectionStore
from runtrail.resume.store import CacheStore
from runtrail.sessions import AgentSessionStore
from runtrail_tools.cli.store_open import open_store_or_explain
from runtrail_tools.ui.settings import UiSettings

T = TypeVar("T")


class Sources:
    """The stores of one deployment, opened on first use and closed by :meth:`close`."""

    def __init__(self, settings: Settings, ui: UiSettings) -> None:
        self.settings = settings
        self.ui = ui
        self.state_dir = settings.state_dir.expanduser().resolve()
        self._opened: dict[str, Any] = {}
        self._lock = threading.Lock()

    # --- locations ------------------------------------------------------------------------
    def projection_url(self) -> str:
        from runtrail_services.projector.settings import ProjectorSettings

        given = self.ui.projection_store_url
        return given or ProjectorSettings.load().resolved_store_url(self.state_dir)

    def audit_url(self) -> str:
        from runtrail_services.audit.settings import AuditSettings

        return self.ui.audit_store_url or AuditSettings.load().resolved_store_url(self.state_dir)

    def capture_url(self) -> str:
        from runtrail_services.capture.settings import CaptureSettings

        given = self.ui.capture_sink_url
        return given or CaptureSettings.load().resolved_sink_url(self.state_dir)

    def cache_url(self) -> str:
        from runtrail_services.resume_cache.settings import ResumeCacheSettings

        given = self.ui.resume_cache_store_url
        return given or ResumeCacheSettings.load().resolved_store_url(self.state_dir)

    def commands_url(self) -> str:
        from runtrail_services.command_api.settings import CommandApiSettings

        given = self.ui.command_store_url
        return given or CommandApiSettings.load().resolved_store(self.state_dir)

    def sessions_url(self) -> str:
        from runtrail_services.sessions.settings import SessionsSettings

        given = self.ui.sessions_store_url
        return given or SessionsSettings.load().resolved_store_url(self.state_dir)

    def drops_url(self) -> str:
        return self.settings.resolved_otlp_drops_url()

    def prune_log_url(self) -> str:
        return self.settings.resolved_prune_log_url()

    # --- stores ---------------------------------------------------------------------------
    def _once(self, kind: str, url: str, opener: Callable[[], T]) -> T:
        with self._lock:
            if kind not in self._opened:
                self._opened[kind] = open_store_or_explain(kind, url, opener)
            return self._opened[kind]  # type: ignore[no-any-return]

    def projections(self) -> ProjectionStore:
        url = self.projection_url()
        return self._once("projection", url, lambda: open_store(PROJECTIONS, url))

    def audit(self) -> LinkStore:
        url = self.audit_url()
        return self._once("audit", url, lambda: open_store(AUDIT_LINKS, url))

    def cache(self) -> CacheStore:
        url = self.cache_url()
        return self._once("resume-cache", url, lambda: open_store(RESUME_ENTRIES, url, readers=2))

    def sessions(self) -> AgentSessionStore:
        url = self.sessions_url()
        return self._once("sessions", url, lambda: open_store(SESSION_SNAPSHOTS, url))

    def resolver(self) -> Resolver:
        """Opens protected content for the tenant a page is scoped to (see timeline)."""
        url = self.settings.content_store_url or "unset"
        return self._once("content", url, lambda: resolver_from_settings(self.settings))

    def commands(self) -> EventStore:
        url = self.commands_url()
        return self._once("command", url, lambda: open_store(COMMAND_EVENTS, url))

    def drops(self) -> SqlDropStore:
        url = self.drops_url()
        return self._once("OTLP drops", url, lambda: open_store(OTLP_DROPS, url))

    def prune_log(self) -> SqlPruneLog:
        url = self.prune_log_url()
        return self._once("prune log", url, lambda: open_store(PRUNE_LOG, url))

    def close(self) -> None:
        with self._lock:
            for store in self._opened.values():
                with contextlib.suppress(Exception):
                    store.close()
            self._opened.clear()


def stack_tokens_file(state_dir: Path) -> Path | None:
    """``<state>/dev/tokens.json`` when ``runtrail dev up`` made one (the demo tenants')."""
    path = state_dir.expanduser().resolve() / "dev" / "tokens.json"
    return path if path.is_file() else None
