"""Command stores of both dialects for the command tests, and small command builders."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtrail.commands import Command, EventStore
from runtrail.config import Settings
from runtrail.events import Actor
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.command_api.service import CommandApiReceiver

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


@contextmanager
def serving_command_api(store_url: str, tokens: Mapping[str, str]) -> Iterator[str]:
    """The command API on a free port over ``store_url`` (tenant -> token), its base URL;
    stopped on exit."""
    receiver = CommandApiReceiver(
        Settings(),
        options={"store": store_url, "http_port": "0", "tokens": json.dumps(dict(tokens))},
        metrics_port=0,
    )
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{receiver.port}"
    finally:
        receiver.request_stop()
        thread.join(15)
