"""Settings of the OTLP/HTTP receiver: ``RUNTRAIL_OTLP_INGEST_*``, overridden by ``-o``.

``mode``: ``forward`` (production: any number of receivers write raw spans to the raw topic and
``runtrail run otlp-mapper`` maps them) or ``map`` (one receiver maps in its own process, as
the dev stack and the demo run it; spans of one trace must all reach it).

Tokens: as the resume-cache's, ``tokens`` is a JSON object tenant → bearer token and
``tokens_file`` a JSON file of the same shape (the file wins per tenant). The token a sender
presents decides the tenant its spans are recorded under; without a token nothing is taken.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtrail.config import ServiceSettings, TenantTokenSettings


class OtlpIngestSettings(TenantTokenSettings, service="otlp-ingest"):
    """What ``runtrail run otlp-ingest`` reads."""

    mode: Literal["map", "forward"] = Field(
        default="map",
        description=(
            "forward: write raw spans and log records to the otlp-raw topic for "
            "`runtrail run otlp-mapper` (scales out, restarts safely); map: map them in this "
            "process (one receiver only)."
        ),
    )
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
        description=(
            "Open traces (runs) whose turns and steps are kept (mode map); the oldest are "
            "forgotten."
        ),
    )
    session_resource_attribute: str | None = Field(
        default=None,
        description=(
            "Resource attribute naming the session of a run whose spans carry no "
            "gen_ai.conversation.id, session.id or langfuse.session.id (e.g. service.instance.id)."
        ),
    )


class OtlpMapperSettings(ServiceSettings, service="otlp-mapper"):
    """What ``runtrail run otlp-mapper`` reads (``RUNTRAIL_OTLP_MAPPER_*``, overridden by ``-o``)."""

    max_traces: int = Field(
        default=10_000,
        ge=1,
        description="Open traces per partition and tenant whose turns and steps are kept.",
    )
    session_resource_attribute: str | None = Field(
        default=None,
        description=(
            "Resource attribute naming the session of a run whose spans carry no "
            "gen_ai.conversation.id, session.id or langfuse.session.id (as otlp-ingest's)."
        ),
    )
    trace_idle_ms: int = Field(
        default=1_800_000,
        ge=1,
        description=(
            "A trace with no record for this long (by the raw records' timestamps) whose root "
            "span never came is forgotten, with the log records waiting for its spans, so the "
            "partition's commit moves on (its next sequence stays in the trace ledger)."
        ),
    )
    ended_linger_ms: int = Field(
        default=60_000,
        ge=0,
        description=(
            "How long a trace whose run ended stays known after its last record, so a span "
            "arriving after the root is dropped as after-run-end, also after a restart."
        ),
    )

    @model_validator(mode="after")
    def _linger_within_idle(self) -> OtlpMapperSettings:
        if self.ended_linger_ms > self.trace_idle_ms:
            raise ValueError("ended_linger_ms must not exceed trace_idle_ms")
        return self
