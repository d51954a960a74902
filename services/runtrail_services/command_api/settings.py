"""Settings of the command API: ``RUNTRAIL_COMMAND_API_*``, overridden by ``-o``.

Tokens as every runtrail API: ``tokens`` a JSON object tenant → bearer token, ``tokens_file``
a JSON file of the same shape (the file wins per tenant). The token decides the tenant whose
runs a request may read and command; without one nothing is answered.
"""

from __future__ import annotations

from pydantic import Field

from runtrail.commands.settings import CommandStoreSettings
from runtrail.config import TenantTokenSettings


class CommandApiSettings(CommandStoreSettings, TenantTokenSettings, service="command-api"):
    """What ``runtrail run command-api`` reads."""

    http_host: str = Field(default="127.0.0.1", description="Bind address of the command API.")
    http_port: int = Field(default=8470, ge=0, description="Port of the command API (0 = any).")
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1, description="Largest command body; larger ones get 413."
    )
