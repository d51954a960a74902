"""Settings of the sessions service: ``RUNTRAIL_SESSIONS_*`` variables, overridden by ``-o``.

They live here, not in :mod:`runtrail.config`, so the service can grow options without
touching the settings every service shares. ``runtrail run sessions -o key=value`` wins over
the environment, which wins over the defaults; an unknown ``-o`` key is an error, not a
silently ignored typo. Bearer tokens are secrets: give them in the environment
(``RUNTRAIL_SESSIONS_HTTP_TOKENS``), not with ``-o``, which other users can see in ``ps``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from runtrail.config import ServiceSettings


def default_store_url(state_dir: Path) -> str:
    """``file://<state_dir>/sessions`` (absolute), the embedded default."""
    return (state_dir.expanduser().resolve() / "sessions").as_uri()


def default_blob_url(state_dir: Path) -> str:
    """``file://<state_dir>/session-blobs`` (absolute): large snapshots when no bucket is set."""
    return (state_dir.expanduser().resolve() / "session-blobs").as_uri()


class SessionsSettings(ServiceSettings, service="sessions"):
    """What ``runtrail run sessions`` and ``runtrail sessions`` read."""

    renamed = {"idle_checkpoint_s": "idle_save_s"}

    store_url: str | None = Field(
        default=None,
        description="Session store: file:///dir or postgresql://user@host:port/db "
        "(default: file://<RUNTRAIL_STATE_DIR>/sessions).",
    )
    every_n_events: int = Field(
        default=100,
        ge=0,
        description="Save a session's snapshot once this many of its events are unsaved (0: never).",
    )
    at_step_end: bool = Field(
        default=True, description="Save a session's snapshot at each STEP_END."
    )
    idle_save_s: float = Field(
        default=30.0,
        gt=0,
        description="Save a session with unsaved events that has been quiet this long, so "
        "a session that stops mid-step does not hold offsets forever.",
    )
    evict_after_s: float = Field(
        default=300.0,
        gt=0,
        description="Forget a saved session quiet this long (it is reloaded from the store when "
        "it speaks again).",
    )
    inline_limit_bytes: int = Field(
        default=256 * 1024,
        ge=0,
        description="Snapshots larger than this go to object storage; the sessions topic "
        "carries their reference and digest instead of the snapshot.",
    )
    blob_url: str | None = Field(
        default=None,
        description="Object storage for large snapshots: s3://bucket/prefix?… or file:///dir "
        "(default: file://<RUNTRAIL_STATE_DIR>/session-blobs).",
    )
    checkpoints_url: str | None = Field(
        default=None,
        description="The LangGraph checkpoint store whose threads the retention policy's "
        "checkpoints entry prunes (default: the session store).",
    )
    publish_pointers: bool = Field(
        default=True,
        description="Publish the latest snapshot of each session to the sessions topic.",
    )
    save_attempts: int = Field(
        default=5,
        ge=1,
        description="Merge-and-retry rounds when another writer saved the same session meanwhile.",
    )
    http_enabled: bool = Field(default=True, description="Serve the session API.")
    http_host: str = Field(default="127.0.0.1", description="Bind address of the session API.")
    http_port: int = Field(default=9431, ge=0, description="Port of the session API (0: any free).")
    http_tokens: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Bearer token of each tenant: JSON {tenant: token} or tenant=token,… "
        "A token reads its own tenant's sessions only.",
    )

    @field_validator("http_tokens", mode="before")
    @classmethod
    def _tokens_from_pairs(cls, value: Any) -> Any:
        """Accept ``tenant=token,tenant=token`` as well as a JSON object."""
        if isinstance(value, str) and value.lstrip().startswith("{"):
            return json.loads(value)
        if isinstance(value, str):
            pairs = [p.strip() for p in value.split(",") if p.strip()]
            if any("=" not in p for p in pairs):
                raise ValueError("http_tokens expects tenant=token pairs separated by commas")
            return dict(p.split("=", 1) for p in pairs)
        return value

    def resolved_store_url(self, state_dir: Path) -> str:
        return self.store_url or default_store_url(state_dir)

    def resolved_blob_url(self, state_dir: Path) -> str:
        return self.blob_url or default_blob_url(state_dir)

    def resolved_checkpoints_url(self, state_dir: Path) -> str:
        return self.checkpoints_url or self.resolved_store_url(state_dir)
