"""Reprocessing never calls external systems (seed 002): the projector service's processing and
the rebuild's fold run with every way out of the process forbidden — sockets, HTTP, processes —
over events that record model calls, tool calls and side-effect intents, and a halted run.

(The library's own test forbids more — the clock, the environment, files — for the pure
projector; around it the service also logs and counts, which read the clock. Kafka is read
by librdkafka outside these paths, and the store is the one thing they write.)
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import Event
from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import replay
from runtrail.runtime import Delivered, ServiceContext
from runtrail_services.projector.replay_fold import ReplayFold
from runtrail_services.projector.service import ProjectorService
from tests.projection_support import Run, full_run


class CalledOut(AssertionError):
    """The code under test reached an external system."""


_AUDITED = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "urllib.",
    "http.",
)
_on = False
_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _on and event.startswith(_AUDITED):
        raise CalledOut(f"audit event {event} {args!r:.100}")


def _refuse(what: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise CalledOut(f"called {what}")

    return call


@contextmanager
def no_external_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    global _on, _installed
    if not _installed:
        sys.addaudithook(_audit)  # permanent, inert outside the block
        _installed = True
    with monkeypatch.context() as m:
        m.setattr(socket, "socket", _refuse("socket.socket"))
        m.setattr(socket, "create_connection", _refuse("socket.create_connection"))
        m.setattr(socket, "getaddrinfo", _refuse("socket.getaddrinfo"))
        m.setattr(subprocess, "Popen", _refuse("subprocess.Popen"))
        m.setattr(urllib.request, "urlopen", _refuse("urllib.request.urlopen"))
        m.setattr(http.client.HTTPConnection, "connect", _refuse("HTTPConnection.connect"))
        _on = True
        try:
            yield
        finally:
            _on = False


def _events() -> list[Event]:
    halted = Run("halted")
    halted.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    halted.add("run.succeeded", {"resultRef": "r"})
    halted.add("TOOL_CALL", {"callId": "c", "toolName": "send_email"}, turn_id="t", step=1)
    return [*full_run("a").events, *halted.events, *full_run("b").events]


def test_the_service_reprocessing_events_calls_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dead: list[str] = []
    context = ServiceContext(
        settings=Settings(),
        options={"store_url": f"sqlite:///{tmp_path / 'p.db'}", "snapshot_every": "5"},
        dead_letter=lambda d, reason, detail: dead.append(reason),
    )
    service = ProjectorService(context)
    service.on_assigned([("events", 0)])
    events = _events()
    batch = [Delivered(e, e.json_form(), "events", 0, i, 0, None) for i, e in enumerate(events)]
    with no_external_calls(monkeypatch):
        service.process(batch)
        service.flush()
        service.process(batch)  # everything again, as after a crash: duplicates, a re-halt
        service.flush()
    assert dead == ["invalid-transition", "invalid-transition"]
    row = service.store.get("t1", "a")
    assert row is not None and row.state == replay(full_run("a").events)
    service.close()


def test_the_rebuild_fold_calls_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(PROJECTIONS, "sqlite:///:memory:")
    fold = ReplayFold(store, "events", snapshot_every=3)
    events = _events()
    with no_external_calls(monkeypatch):
        for offset, event in enumerate(events):
            fold.add(0, offset, event)
        fold.write({0: len(events)})
    assert [h.run_id for h in fold.halted] == ["halted"]
    assert store.stored_offsets("events", [0]) == {0: len(events)}


@pytest.mark.parametrize(
    "reach_out",
    [
        lambda: socket.create_connection(("127.0.0.1", 9)),
        lambda: urllib.request.urlopen("http://127.0.0.1:9/"),
        lambda: subprocess.run(["true"], check=False),
        lambda: http.client.HTTPConnection("127.0.0.1", 9).request("GET", "/"),
    ],
)
def test_the_guard_catches_each_way_out(monkeypatch: pytest.MonkeyPatch, reach_out: Any) -> None:
    """The tests above could fail: each external call does raise inside the guard."""
    with no_external_calls(monkeypatch), pytest.raises(CalledOut):
        reach_out()
