"""Command stores of both dialects for the command tests, and small command builders."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtrail.commands import Command, EventStore
from runtrail.events import Actor
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import sqlite_url

OPERATOR = Actor(kind="operator", id="op-1")


def command(
    name: str,
    run: str,
    version: int,
    data: dict[str, Any] | None = None,
    *,
    tenant: str = "acme",
    key: str | None = None,
) -> Command:
    return Command(
        name=name,
        tenant_id=tenant,
        run_id=run,
        expected_version=version,
        idempotency_key=key or f"k-{uuid.uuid4().hex}",  # unique across processes too
        actor=OPERATOR,
        data=data or {},
    )


def accept(run: str, *, tenant: str = "acme") -> Command:
    return command(
        "accept_run", run, 0, {"goalRef": "goal-1", "policyVersion": "p1"}, tenant=tenant
    )


@dataclass
class StoreBackend:
    """A command store URL of one dialect; ``open()`` gives another handle (another client)."""

    dialect: str
    url: str
    opened: list[EventStore] = field(default_factory=list)

    def open(self, **options: Any) -> EventStore:
        store = open_store(COMMAND_EVENTS, self.url, **options)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def command_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    if request.param == "sqlite":
        made = StoreBackend("sqlite", sqlite_url(tmp_path / "commands.db"))
    else:
        made = StoreBackend("postgresql", request.getfixturevalue("postgres_url"))
    yield made
    made.close()
