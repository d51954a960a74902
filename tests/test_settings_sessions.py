"""The sessions service's merge-and-retry bound as users set it:
``RUNTRAIL_SESSIONS_SAVE_ATTEMPTS`` in the service's environment. (Two members merging each
other's saves at the default: test_sessions_service.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import validate_json_form
from runtrail.runtime import Delivered, ServiceContext
from runtrail.sessions import AgentSession
from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.sessions.service import SessionsService, wall_ms
from tests.checkpoint_support import held
from tests.sessions_support import session_forms

TOPIC = "events"


def _delivered(forms: list[dict[str, Any]]) -> list[Delivered]:
    return [
        Delivered(validate_json_form(f), f, TOPIC, 0, i, 0, f["runId"].encode())
        for i, f in enumerate(forms)
    ]


class Rival:
    """Another writer of the same session (a member that owns its other run's partition):
    before each of the service's saves it saves one more event of its own, until it has no
    more, so each of those saves finds the stored snapshot changed."""

    def __init__(self, store: FileSessionStore, forms: list[dict[str, Any]]) -> None:
        self.store = store
        self.forms = list(forms)
        self.saved = 0

    def save_one(self) -> None:
        if not self.forms:
            return
        stored = self.store.load("t1", "s1")
        session = AgentSession.from_snapshot(stored) if stored else AgentSession("t1", "s1")
        session.apply(validate_json_form(self.forms.pop(0)))
        assert self.store.save_if(session.snapshot(), stored.digest if stored else None)
        self.saved += 1


def test_save_attempts_from_the_environment_bounds_the_merge_and_retry_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_SESSIONS_SAVE_ATTEMPTS=8``, a save that another writer beats six times in
    a row still lands in the turn that made it due, merged with all the other writer's events,
    and no offset stays held. If the setting were ignored (the default 5 rounds), the save
    would give up after five as if the store were down: the session unsaved in that turn, its
    offsets held and the service not ready until a later flush gets through."""
    monkeypatch.setenv("RUNTRAIL_SESSIONS_SAVE_ATTEMPTS", "8")
    forms = session_forms(20)  # run-a's ten events, then run-b's ten
    ours, theirs = forms[:10], forms[10:16]
    svc = SessionsService(
        ServiceContext(
            settings=Settings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path),
            options={
                "http_enabled": "false",
                "publish_pointers": "false",
                "every_n_events": "0",
                "at_step_end": "false",
            },
            registry=CollectorRegistry(),
        )
    )
    rival = Rival(FileSessionStore(tmp_path / "sessions"), theirs)
    save_if, save_all_if = svc.store.save_if, svc.store.save_all_if

    def beaten_save_if(*args: Any, **kwargs: Any) -> Any:
        rival.save_one()
        return save_if(*args, **kwargs)

    def beaten_save_all_if(*args: Any, **kwargs: Any) -> Any:
        rival.save_one()
        return save_all_if(*args, **kwargs)

    monkeypatch.setattr(svc.store, "save_if", beaten_save_if)
    monkeypatch.setattr(svc.store, "save_all_if", beaten_save_all_if)
    try:
        svc.process(_delivered(ours))
        svc.tick(wall_ms() + 60_000)  # idle past idle_save_s: the session is due, saved here
        stored = FileSessionStore(tmp_path / "sessions").load("t1", "s1")  # before any flush
        expected = AgentSession("t1", "s1")
        for f in ours + theirs:
            expected.apply(validate_json_form(f))
        assert stored is not None and stored.event_log == list(expected.events()), (
            f"not saved in its turn: gave up after {rival.saved} rounds lost to the other writer"
        )
        assert rival.saved == len(theirs)
        assert held(svc) == {}
    finally:
        monkeypatch.undo()
        svc.close()


def test_at_step_end_false_from_the_environment_saves_no_snapshot_at_a_step_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``RUNTRAIL_SESSIONS_AT_STEP_END=false`` (and no count trigger) a session whose step
    ended is not saved at that STEP_END: its offsets stay held until another trigger (here the
    idle save) saves it. Ignored, every STEP_END would cost a snapshot write and fsync, the
    load the operator turned off."""
    monkeypatch.setenv("RUNTRAIL_SESSIONS_AT_STEP_END", "false")
    monkeypatch.setenv("RUNTRAIL_SESSIONS_EVERY_N_EVENTS", "0")
    svc = SessionsService(
        ServiceContext(
            settings=Settings(bootstrap_servers="127.0.0.1:1", state_dir=tmp_path),
            options={"http_enabled": "false", "publish_pointers": "false"},
            registry=CollectorRegistry(),
        )
    )
    store = FileSessionStore(tmp_path / "sessions")
    try:
        forms = session_forms(5)  # ends on the step's STEP_END
        assert forms[-1]["type"] == "STEP_END"
        svc.process(_delivered(forms))
        svc.tick(wall_ms())
        assert store.load("t1", "s1") is None
        assert held(svc) == {(TOPIC, 0): 0}
        svc.tick(wall_ms() + 60_000)  # quiet past idle_save_s
        saved = store.load("t1", "s1")
        assert saved is not None and saved.revision == 5
        assert held(svc) == {}
    finally:
        svc.close()
