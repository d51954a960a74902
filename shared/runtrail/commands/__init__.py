"""The write side of seed 002: commands decided under optimistic concurrency, appended to an
event store (SQLite or PostgreSQL), relayed to the events topic through an outbox.

* :mod:`.model` — a command and its outcome;
* :mod:`.catalog` — the seed's commands and the events each appends;
* :mod:`.store` — the event store (one transaction per command);
* :mod:`.relay` — the outbox relay to Kafka;
* :mod:`.resume` — the resume protocol.

The names below are imported from their module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the settings, the catalog) does not load the event store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.commands.model import Command, CommandOutcome
    from runtrail.commands.store import EventStore

__getattr__ = lazy_exports(
    __name__, {".model": ("Command", "CommandOutcome"), ".store": ("EventStore",)}
)


def default_store_url(state_dir: Path) -> str:
    """``sqlite:///<state_dir>/commands.db`` (absolute), the embedded default."""
    return f"sqlite:///{state_dir.expanduser().resolve() / 'commands.db'}"


__all__ = ["Command", "CommandOutcome", "EventStore", "default_store_url"]
