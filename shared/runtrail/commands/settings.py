"""The command store option both of its services read (``-o store=…`` or
``RUNTRAIL_<SERVICE>_STORE``): the command API writes the store, the outbox relay publishes
its outbox, so the two must resolve the same URL the same way."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from runtrail.commands import default_store_url
from runtrail.config import ServiceSettings


class CommandStoreSettings(ServiceSettings):
    """Base of the settings of a service on the command event store."""

    store: str | None = Field(
        default=None,
        description="Command event store (sqlite:/// or postgresql://): the command API writes "
        "it, the outbox relay publishes its outbox (default: "
        "sqlite:///<RUNTRAIL_STATE_DIR>/commands.db).",
    )

    def resolved_store(self, state_dir: Path) -> str:
        """The store URL, defaulting to the SQLite file under the state folder."""
        return self.store or default_store_url(state_dir)
