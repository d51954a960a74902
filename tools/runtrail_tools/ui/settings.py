"""Settings of the run explorer: ``RUNTRAIL_UI_*`` variables, overridden by ``runtrail ui`` flags.

Store locations default to what each service's own settings resolve (``RUNTRAIL_<NAME>_*``,
else its embedded default under the state folder), so the explorer reads exactly the stores
the services write; a flag points one of them elsewhere (a copy, an auditor's database).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from runtrail.config import merged_tokens, tokens_from_json


class UiSettings(BaseSettings):
    """What ``runtrail ui`` reads."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_UI_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Bind address of the explorer.")
    port: int = Field(default=9480, ge=0, description="Port of the explorer (0: any free).")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names requests may carry besides the bound address's own (a proxy's "
        "name; comma-separated). Other Host headers are refused.",
    )
    tokens: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Bearer token of each tenant: JSON {tenant: token}. A token sees its own "
        "tenant's runs only.",
    )
    tokens_file: Path | None = Field(
        default=None,
        description="JSON file {tenant: token}, merged over `tokens` (`runtrail dev up` "
        "writes <state>/dev/tokens.json).",
    )
    page_size: int = Field(default=50, ge=1, le=1000, description="Runs per page of the list.")
    model_client: str | None = Field(
        default=None,
        description="MODULE:FACTORY of the model client for live replay, imported at start "
        "(a wrong one stops the explorer); unset, live replay is off (mock replay always "
        "works).",
    )
    price_table: Path | None = Field(
        default=None,
        description="JSON or TOML file of model → input/output price per 1M tokens (`models`, "
        "optional `currency`), read at start; unset, no costs are shown.",
    )
    command_url: str | None = Field(
        default=None,
        description="The command API (its base URL), for approve, deny and cancel from a run's "
        "page with the signed-in tenant's token; unset, the run page offers no actions (a "
        "stack started by `runtrail dev up` gives its own).",
    )
    projection_store_url: str | None = Field(
        default=None, description="Projection store (default: the projector's)."
    )
    audit_store_url: str | None = Field(
        default=None, description="Audit link store (default: the audit service's)."
    )
    capture_sink_url: str | None = Field(
        default=None, description="Capture sink (default: the capture service's)."
    )
    resume_cache_store_url: str | None = Field(
        default=None, description="Resume-cache store (default: the resume-cache service's)."
    )
    sessions_store_url: str | None = Field(
        default=None, description="Session store (default: the sessions service's)."
    )
    command_store_url: str | None = Field(
        default=None,
        description="Command event store, for the refused commands a run's page lists "
        "(default: the command API's).",
    )

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts_from_text(cls, value: Any) -> Any:
        return (
            [h.strip() for h in value.split(",") if h.strip()] if isinstance(value, str) else value
        )

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_from_json(cls, value: Any) -> Any:
        return tokens_from_json(value)

    def tenant_tokens(self) -> dict[str, str]:
        """Tenant → token, from ``tokens`` and ``tokens_file`` (the file wins per tenant);
        a tenant with an empty token is left out."""
        tokens = merged_tokens(self.tokens, self.tokens_file)
        return {tenant: token for tenant, token in tokens.items() if token}
