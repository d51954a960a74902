"""Settings of the OTLP/HTTP receiver: ``RUNTRAIL_OTLP_INGEST_*``, overridden by ``-o``.

Tokens: as the resume-cache's, ``tokens`` is a JSON object tenant → bearer token and
``tokens_file`` a JSON file of the same shape (the file wins per tenant). The token a sender
presents decides the tenant its spans are recorded under; without a token nothing is taken.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from runtrail.config import ServiceSettings


class OtlpIngestSettings(ServiceSettings):
    """What ``runtrail run otlp-ingest`` reads."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_OTLP_INGEST_", extra="ignore")
    service_name = "otlp-ingest"

    http_host: str = Field(default="127.0.0.1", description="Bind address of the OTLP receiver.")
    http_port: int = Field(
        default=4318, ge=0, description="Port of POST /v1/traces (4318: OTLP/HTTP's; 0 = any)."
    )
    tokens: dict[str, str] = Field(
        default_factory=dict, description="Bearer token per tenant, as a JSON object."
    )
    tokens_file: Path | None = Field(
        default=None, description="JSON file {tenant: token}; merged over `tokens`."
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1,
        description="Largest request body as sent (compressed); larger ones get 413.",
    )
    max_decoded_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1,
        description="Largest request body after gunzip; a body that inflates past it gets 413.",
    )
    max_traces: int = Field(
        default=10_000,
        ge=1,
        description="Open traces (runs) whose turns and steps are kept; the oldest are forgotten.",
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_from_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    def tenant_tokens(self) -> dict[str, str]:
        """Tenant → token, from ``tokens`` and ``tokens_file``."""
        tokens = dict(self.tokens)
        if self.tokens_file is not None:
            loaded = json.loads(self.tokens_file.read_text())
            if not isinstance(loaded, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
            ):
                raise ValueError(f"{self.tokens_file}: expected a JSON object tenant -> token")
            tokens.update(loaded)
        empty = [t for t, tok in tokens.items() if not tok]
        if empty:
            raise ValueError(f"empty token for tenant(s) {', '.join(sorted(empty))}")
        return tokens
