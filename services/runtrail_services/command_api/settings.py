"""Settings of the command API: ``RUNTRAIL_COMMAND_API_*``, overridden by ``-o``.

Tokens as every runtrail API: ``tokens`` a JSON object tenant → bearer token, ``tokens_file``
a JSON file of the same shape (the file wins per tenant). The token decides the tenant whose
runs a request may read and command; without one nothing is answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from runtrail.commands import default_store_url
from runtrail.config import ServiceSettings
from runtrail.http_server import load_tenant_tokens


class CommandApiSettings(ServiceSettings):
    """What ``runtrail run command-api`` reads."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_COMMAND_API_", extra="ignore")
    service_name = "command-api"

    store: str | None = Field(
        default=None,
        description="Command event store (sqlite:/// or postgresql://); the outbox relay reads it "
        "(default: sqlite:///<RUNTRAIL_STATE_DIR>/commands.db).",
    )
    http_host: str = Field(default="127.0.0.1", description="Bind address of the command API.")
    http_port: int = Field(default=8470, ge=0, description="Port of the command API (0 = any).")
    tokens: dict[str, str] = Field(
        default_factory=dict, description="Bearer token per tenant, as a JSON object."
    )
    tokens_file: Path | None = Field(
        default=None, description="JSON file {tenant: token}; merged over `tokens`."
    )
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1, description="Largest command body; larger ones get 413."
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    def tenant_tokens(self) -> dict[str, str]:
        return load_tenant_tokens(self.tokens, self.tokens_file)

    def resolved_store(self, state_dir: Path) -> str:
        """The store URL, defaulting to the SQLite file under the state folder."""
        return self.store or default_store_url(state_dir)
