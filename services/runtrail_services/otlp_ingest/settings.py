"""Settings of the OTLP/HTTP receiver: ``RUNTRAIL_OTLP_INGEST_*``, overridden by ``-o``.

Tokens: as the resume-cache's, ``tokens`` is a JSON object tenant → bearer token and
``tokens_file`` a JSON file of the same shape (the file wins per tenant). The token a sender
presents decides the tenant its spans are recorded under; without a token nothing is taken.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from runtrail.config import TenantTokenSettings


class OtlpIngestSettings(TenantTokenSettings):
    """What ``runtrail run otlp-ingest`` reads."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_OTLP_INGEST_", extra="ignore")
    service_name = "otlp-ingest"

    http_host: str = Field(default="127.0.0.1", description="Bind address of the OTLP receiver.")
    http_port: int = Field(
        default=4318, ge=0, description="Port of POST /v1/traces (4318: OTLP/HTTP's; 0 = any)."
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
    session_resource_attribute: str | None = Field(
        default=None,
        description=(
            "Resource attribute naming the session of a run whose spans carry no "
            "gen_ai.conversation.id, session.id or langfuse.session.id (e.g. service.instance.id)."
        ),
    )
