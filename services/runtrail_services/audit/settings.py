"""Settings of the audit service and CLI: ``RUNTRAIL_AUDIT_*`` variables, overridden by ``-o``.

They live here, not in :mod:`runtrail.config`, so the audit service can grow options without
touching the settings every service shares. ``runtrail run audit -o key=value`` (or a CLI
flag) wins over the environment, which wins over the defaults; an unknown ``-o`` key is an
error, not a silently ignored typo. Paths left unset default to the state folder.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from runtrail.audit.tree_head import DEFAULT_LOG_ORIGIN, DEFAULT_ORIGIN
from runtrail.config import ServiceSettings
from runtrail.persistence.urls import sqlite_url


class AuditSettings(ServiceSettings, service="audit"):
    """What ``runtrail run audit`` and ``runtrail audit …`` read."""

    deprecated = {"checkpoint_interval_s": "tree_head_interval_s"}

    store_url: str | None = Field(
        default=None,
        description="Link store: sqlite:///path.db or postgresql://… "
        "(default: sqlite:///<RUNTRAIL_STATE_DIR>/audit.db).",
    )
    key_path: Path | None = Field(
        default=None,
        description="Ed25519 key signing tree heads and log checkpoints, PEM or raw; generated "
        "on first use (default: <RUNTRAIL_STATE_DIR>/audit/checkpoint.key, public key beside it as .pub).",
    )
    key_name: str = Field(
        default=DEFAULT_ORIGIN,
        description="Name the tree head signatures carry (no spaces, no '+').",
    )
    origin: str = Field(default=DEFAULT_ORIGIN, description="Origin line of the signed tree heads.")
    log_origin: str = Field(
        default=DEFAULT_LOG_ORIGIN,
        description="Origin line of the transparency log's checkpoints (one tree per origin).",
    )
    tiles_url: str | None = Field(
        default=None,
        description="Where the log's C2SP tiles and checkpoint are written: file:///dir or "
        "s3://bucket/prefix (default: file://<RUNTRAIL_STATE_DIR>/audit/tlog).",
    )
    log_http_enabled: bool = Field(
        default=False, description="Serve the log's tiles and proofs over HTTP (the audit API)."
    )
    log_http_host: str = Field(default="127.0.0.1", description="Bind address of the audit API.")
    log_http_port: int = Field(default=9441, ge=0, description="Port of the audit API (0: any).")
    witnesses: dict[str, str] = Field(
        default_factory=dict,
        description="Witnesses that cosign the log's checkpoints (C2SP tlog-witness): JSON "
        '{"<add-checkpoint base URL>": "<witness verifier key name+id+key>"}.',
    )
    witness_quorum: int = Field(
        default=1,
        ge=1,
        description="Cosignatures that make a log checkpoint witnessed (at most the witnesses).",
    )
    tree_head_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="Sign a tree head over all run heads this often, when they changed "
        "(0: only on demand).",
    )
    publish: bool = Field(
        default=True,
        description="Publish sealed links and tree heads to RUNTRAIL_AUDIT_TOPIC.",
    )
    max_cached_runs: int = Field(
        default=100_000,
        ge=1,
        description="Run heads kept in memory; beyond this the least recently used are "
        "dropped after a flush and re-read from the store when their run comes back.",
    )

    def resolved_store_url(self, state_dir: Path) -> str:
        return self.store_url or sqlite_url(state_dir.expanduser() / "audit.db")

    def resolved_tiles_url(self, state_dir: Path) -> str:
        return self.tiles_url or (state_dir.expanduser().resolve() / "audit" / "tlog").as_uri()

    def resolved_key_path(self, state_dir: Path) -> Path:
        return self.key_path or state_dir.expanduser().resolve() / "audit" / "checkpoint.key"
