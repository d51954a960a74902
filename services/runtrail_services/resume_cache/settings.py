"""Settings of the resume-cache service: ``RUNTRAIL_RESUME_CACHE_*``, overridden by ``-o``.

They live here, not in :mod:`runtrail.config`, so this service can grow options without touching
what every service shares. ``-o key=value`` wins over the environment, which wins over the
defaults; an unknown ``-o`` key is an error, not a silently ignored typo.

Tokens: ``tokens`` is a JSON object tenant → bearer token (``RUNTRAIL_RESUME_CACHE_TOKENS``),
``tokens_file`` a JSON file of the same shape (read at start; both may be given, the file wins
per tenant). A tenant without a token cannot look anything up.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from runtrail.config import TenantTokenSettings
from runtrail.persistence.urls import sqlite_url


class ResumeCacheSettings(TenantTokenSettings, service="resume-cache"):
    """What ``runtrail run resume-cache`` and ``runtrail cache`` read."""

    store_url: str | None = Field(
        default=None,
        description="sqlite:///path.db or postgresql://… (default: "
        "sqlite:///<RUNTRAIL_STATE_DIR>/resume-cache.db).",
    )
    http_host: str = Field(default="127.0.0.1", description="Bind address of the lookup API.")
    http_port: int = Field(default=9421, ge=0, description="Port of the lookup API (0 = any).")
    wait_timeout_ms: int = Field(
        default=10_000,
        ge=0,
        description="Longest a read-your-writes lookup waits for the service to catch up.",
    )
    publish_topic: bool = Field(
        default=True, description="Also write entries to the compacted cache topic."
    )
    readers: int = Field(
        default=8,
        ge=1,
        description="Store connections for lookups (PostgreSQL; the SQLite store reads through one).",
    )

    def resolved_store_url(self, state_dir: Path) -> str:
        return self.store_url or sqlite_url(state_dir / "resume-cache.db")
