"""Reprocessing never calls external systems: a replay reads no clock, no environment, no file,
no network and starts no process (seed 002: "projection code must not read the current time,
call a model, fetch a URL, or inspect mutable configuration")."""

from __future__ import annotations

import builtins
import datetime as dt
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Self

import pytest

from runtrail.events import Event
from runtrail.projection import (
    ProjectionError,
    ProjectionSnapshot,
    RunProjection,
    apply_event,
    replay,
    replay_runs,
    take_snapshot,
)
from tests.projection_support import Run, full_run


class OutsideWorld(AssertionError):
    """The projector reached outside itself."""


def _forbidden(what: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise OutsideWorld(f"projector called {what}")

    return call


class _NoEnviron(Mapping[str, str]):
    def __getitem__(self, key: str) -> str:
        raise OutsideWorld(f"projector read os.environ[{key!r}]")

    def __iter__(self) -> Iterator[str]:
        raise OutsideWorld("projector listed os.environ")

    def __len__(self) -> int:
        raise OutsideWorld("projector measured os.environ")

    def get(self, key: str, default: Any = None) -> Any:
        raise OutsideWorld(f"projector read os.environ.get({key!r})")


class _FrozenDate(dt.date):
    @classmethod
    def today(cls) -> Self:
        raise OutsideWorld("projector called date.today")


class _FrozenClock(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> Self:
        raise OutsideWorld("projector called datetime.now")

    @classmethod
    def utcnow(cls) -> Self:
        raise OutsideWorld("projector called datetime.utcnow")

    @classmethod
    def today(cls) -> Self:
        raise OutsideWorld("projector called datetime.today")


_AUDITED = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "open",
    "urllib.",
    "http.",
)
_guard_on = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _guard_on and event.startswith(_AUDITED):
        raise OutsideWorld(f"projector raised audit event {event} {args!r:.100}")


_hook_installed = False


@contextmanager
def outside_world_forbidden(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inside the block, any clock, environment, file, network or process access raises."""
    global _guard_on, _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # cannot be removed; inert outside a guarded block
        _hook_installed = True
    with monkeypatch.context() as m:
        for name in (
            "time",
            "time_ns",
            "monotonic",
            "monotonic_ns",
            "localtime",
            "gmtime",
            "sleep",
        ):
            m.setattr(time, name, _forbidden(f"time.{name}"))
        m.setattr(dt, "datetime", _FrozenClock)
        m.setattr(dt, "date", _FrozenDate)
        for name, module in list(sys.modules.items()):
            if name.startswith("runtrail.projection") and hasattr(module, "datetime"):
                m.setattr(module, "datetime", _FrozenClock)
        m.setattr(os, "environ", _NoEnviron())
        m.setattr(os, "getenv", _forbidden("os.getenv"))
        m.setattr(builtins, "open", _forbidden("open"))
        m.setattr(socket, "socket", _forbidden("socket.socket"))
        m.setattr(socket, "create_connection", _forbidden("socket.create_connection"))
        m.setattr(socket, "getaddrinfo", _forbidden("socket.getaddrinfo"))
        m.setattr(subprocess, "Popen", _forbidden("subprocess.Popen"))
        _guard_on = True
        try:
            yield
        finally:
            _guard_on = False


def _varied_events() -> list[Event]:
    """Every event type, an expiring approval (timestamp comparison), a gap and a duplicate."""
    events = full_run().events
    r = Run("run-2")
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add(
        "run.approval_required",
        {"actionDigest": "d", "expiresAt": "2026-11-30T00:00:00Z"},
        version=2,
    )
    r.add(
        "run.approval_granted",
        {"actionDigest": "d", "approvedBy": "op"},
        occurred_at="2026-11-29T10:00:00+01:00",
    )
    r.add("run.approval_required", {"actionDigest": "e"}, version=1)
    r.add("run.cancellation_requested", {})
    r.add("run.cancellation_acknowledged", {"reason": "stop"})
    return [*events, *r.events, r.events[2]]


def test_replay_makes_no_external_call(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _varied_events()
    expected = replay_runs(events)  # warm-up outside the guard: imports and lazy init happen here
    snapshot_json = take_snapshot(replay(events[:10])).to_json()
    with outside_world_forbidden(monkeypatch):
        result = replay_runs(events)
        from_snapshot = replay(events[10:27], start=ProjectionSnapshot.from_json(snapshot_json))
        rejected = replay_runs([*events, events[5]])  # a duplicate after the end: still pure
    assert not result.halted and not expected.halted
    assert result.projections == expected.projections
    assert from_snapshot == expected.projections[("t1", "run-1")]
    assert rejected.projections == expected.projections


def test_rejections_make_no_external_call(monkeypatch: pytest.MonkeyPatch) -> None:
    r = Run()
    r.add("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    r.add(
        "run.approval_required",
        {"actionDigest": "d", "expiresAt": "2026-11-29T09:00:00Z"},
        version=2,
    )
    late = r.build("run.approval_granted", {"actionDigest": "d", "approvedBy": "op"})
    state = replay(r.events)
    with pytest.raises(Exception, match="expired"):
        apply_event(state, late)
    with outside_world_forbidden(monkeypatch), pytest.raises(Exception, match="expired") as info:
        apply_event(state, late)
    assert not isinstance(info.value, OutsideWorld)


@pytest.mark.parametrize(
    "reach_out",
    [
        lambda: time.time(),
        lambda: dt.datetime.now(),
        lambda: dt.date.today(),
        lambda: os.environ["HOME"],
        lambda: os.environ.get("HOME"),
        lambda: os.getenv("HOME"),
        lambda: open("/etc/hostname"),  # noqa: SIM115
        lambda: socket.create_connection(("127.0.0.1", 9)),
        lambda: socket.socket(),
        lambda: subprocess.run(["true"], check=False),
        lambda: __import__("io").open("/etc/hostname"),
    ],
)
def test_the_guard_catches_each_kind_of_access(
    monkeypatch: pytest.MonkeyPatch, reach_out: Any
) -> None:
    """The purity test could fail: each forbidden access does raise inside the guard."""
    with outside_world_forbidden(monkeypatch), pytest.raises(OutsideWorld):
        reach_out()


def test_the_projection_module_namespace_holds_no_clock_reader() -> None:
    """Belt and braces: no projector module imports time or random at all."""
    import runtrail.projection as package

    del package
    for name, module in sorted(sys.modules.items()):
        if name.startswith("runtrail.projection") and not name.startswith(
            "runtrail.projection.store"
        ):
            assert "time" not in vars(module), name
            assert "random" not in vars(module), name
            assert "os" not in vars(module), name


def test_state_is_plain_data() -> None:
    state = replay(full_run().events)
    assert RunProjection.from_json(state.to_json()) == state


def test_folding_copies_a_projection_exactly_as_model_copy_does() -> None:
    """The fold's own copy of the state (a tenth of its cost was ``model_copy``) makes the same
    model: the same fields, the same fields set, the old state untouched."""
    from runtrail.projection.model import RunProjection, SequenceGap
    from runtrail.projection.projector import _updated

    state = RunProjection(
        tenant_id="t",
        run_id="r",
        status="received",
        version=0,
        origin="accepted",
        last_event_id="e0",
        policy_version=None,
    )
    changes = {
        "status": "executing",
        "version": 3,
        "last_event_id": "e3",
        "gaps": (SequenceGap(first=1, last=2),),
        "step": 4,
    }
    ours, theirs = _updated(state, changes), state.model_copy(update=changes)
    assert type(ours) is type(theirs) and ours == theirs
    assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
    assert ours.model_dump() == theirs.model_dump()
    assert (
        state.version == 0 and state.status == "received" and "step" not in state.model_fields_set
    )


def test_folding_in_place_makes_what_copying_makes() -> None:
    """``apply_event(..., in_place=True)`` (the replay's drafts) gives, event after event, the
    very model the pure fold gives: fields, fields set and JSON text."""
    events = full_run().events
    pure: RunProjection | None = None
    draft: RunProjection | None = None
    for event in events:
        pure = apply_event(pure, event)
        draft = apply_event(draft, event, in_place=draft is not None)
        assert draft == pure and draft.to_json() == pure.to_json()
        assert draft.__pydantic_fields_set__ == pure.__pydantic_fields_set__


def test_folding_in_place_changes_nothing_when_an_event_is_refused_or_a_duplicate() -> None:
    events = full_run().events
    state = replay(events[:5])
    before = state.to_json()
    assert apply_event(state, events[3], in_place=True) is state  # a duplicate
    with pytest.raises(ProjectionError):
        apply_event(state, events[0].model_copy(update={"sequence": 6}), in_place=True)
    assert state.to_json() == before
