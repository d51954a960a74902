"""Settings of the projector: ``RUNTRAIL_PROJECTOR_*`` variables, overridden by ``-o``.

They live here, not in :mod:`runtrail.config`, so the projector can grow options without
touching the settings every service shares. ``runtrail run projector -o key=value`` wins over
the environment, which wins over the defaults; an unknown ``-o`` key is an error, not a
silently ignored typo.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from runtrail.config import ServiceSettings
from runtrail.persistence.urls import sqlite_url


class ProjectorSettings(ServiceSettings, service="projector"):
    """What ``runtrail run projector``, ``runtrail projection`` and the replay read."""

    store_url: str | None = Field(
        default=None,
        description="Projection store: sqlite:///path.db or postgresql://user@host/db "
        "(default: sqlite:///<RUNTRAIL_STATE_DIR>/projection.db).",
    )
    snapshot_every: int = Field(
        default=100,
        ge=0,
        description="Snapshot a run each time its sequence crosses a multiple of this "
        "(0: never). Snapshots are the starting points of `replay projection --snapshots`.",
    )
    halt_on_gap: bool = Field(
        default=True,
        description="Halt a run whose next event skips sequences (an event was dead-lettered "
        "or lost) instead of recording the gap and going on. The replay reads this too: keep "
        "it the same for the service and its shadow rebuild.",
    )
    cached_runs: int = Field(
        default=50_000,
        ge=1,
        description="Run states kept in memory per partition; older ones are reloaded from "
        "the store when their run speaks again.",
    )

    def resolved_store_url(self, state_dir: Path) -> str:
        """The store URL, defaulting to the SQLite file under the state folder."""
        return self.store_url or sqlite_url(state_dir / "projection.db")
