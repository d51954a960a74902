"""The sessions service in process: save policy, held offsets, pointers, two writers,
halting on an untrusted snapshot. (End to end over real processes: test_sessions_end_to_end.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.events import validate_json_form
from runtrail.files import readable_by_others
from runtrail.runtime import Delivered, ServiceContext
from runtrail.sessions import AgentSession
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail.sessions.naming import session_key
from runtrail.sessions.pointer import SessionPointer
from runtrail.sessions.store_file import FileSessionStore
from runtrail_services.sessions.service import SessionsService, wall_ms
from runtrail_services.sessions.settings import SessionsSettings
from tests.checkpoint_support import held
from tests.s3_fixture import moto_s3, s3_url  # noqa: F401  (fixtures)
from tests.sessions_support import read_pointers, session_forms
from tests.support import create_topic, unique_topic

TOPIC = "events"


def service(tmp_path: Path, bootstrap: str = "127.0.0.1:1", **options: Any) -> SessionsService:
    settings = Settings(
        bootstrap_servers=bootstrap,
        sessions_topic=options.pop("sessions_topic", "sessions"),
        state_dir=tmp_path,
    )
    given = {"http_enabled": "false", "publish_pointers": "false", **options}
    context = ServiceContext(
        settings=settings,
        options={k: str(v) for k, v in given.items()},
        registry=CollectorRegistry(),
    )
    return SessionsService(context)


def delivered(
    forms: list[dict[str, Any]], first_offset: int, partition: int = 0
) -> list[Delivered]:
    return [
        Delivered(
            validate_json_form(f), f, TOPIC, partition, first_offset + i, 0, f["runId"].encode()
        )
        for i, f in enumerate(forms)
    ]


def turn(svc: SessionsService, batch: list[Delivered]) -> None:
    """One turn of the runtime's loop: the batch, then the tick that saves what it made due."""
    svc.process(batch)
    svc.tick(wall_ms())


def saves(svc: SessionsService, trigger: str) -> float:
    value = svc.context.registry.get_sample_value(
        "runtrail_sessions_saves_total", {"service": "sessions", "trigger": trigger}
    )
    return value or 0.0


def test_save_policy_and_held_offsets(tmp_path: Path) -> None:
    svc = service(tmp_path, every_n_events=4, at_step_end="true")
    store = FileSessionStore(tmp_path / "sessions")  # the default store: <state dir>/sessions
    forms = session_forms(7)  # request, response, call, result, STEP_END, request, snapshot
    events = delivered(forms, first_offset=100)

    turn(svc, events[:3])
    assert store.load("t1", "s1") is None
    assert held(svc) == {(TOPIC, 0): 100}  # nothing saved: commit stops at the first

    turn(svc, events[3:4])  # the 4th unsaved event
    assert store.load("t1", "s1").revision == 4  # type: ignore[union-attr]
    assert held(svc) == {} and saves(svc, "every_n") == 1

    svc.process(events[4:5])  # STEP_END: due, saved with the rest of the batch at its tick
    assert store.load("t1", "s1").revision == 4  # type: ignore[union-attr]
    svc.tick(wall_ms())
    assert store.load("t1", "s1").revision == 5  # type: ignore[union-attr]
    assert saves(svc, "step_end") == 1

    turn(svc, events[5:7] + events[2:3])  # a re-delivered event changes nothing
    assert held(svc) == {(TOPIC, 0): 105}
    svc.on_revoked([(TOPIC, 0)])  # save, then forget
    saved = store.load("t1", "s1")
    assert saved is not None and saved.revision == 7 and saves(svc, "revoke") == 1
    assert saved.memory == {"turns": 6, "notes": ["n0", "n1", "n2", "n3", "n4", "n5"]}
    assert held(svc) == {} and not svc._sessions

    svc.process(delivered(session_forms(9)[7:], first_offset=107))  # reloaded from the store
    svc.close()  # shutdown save
    final = store.load("t1", "s1")
    assert final is not None and final.revision == 9 and saves(svc, "shutdown") == 1
    whole = AgentSession("t1", "s1")
    for d in delivered(session_forms(9), first_offset=100):
        whole.apply(d.event, source=(d.topic, d.partition, d.offset))
    assert final.digest == whole.snapshot().digest


def test_idle_sessions_are_saved_and_saved_ones_forgotten(tmp_path: Path) -> None:
    svc = service(tmp_path, every_n_events=0, at_step_end="false", idle_save_s=5, evict_after_s=60)
    no_session = [
        dict(f, sessionId=sid)
        for f, sid in zip(session_forms(2, session="x"), (None, ""), strict=True)
    ]
    svc.process(delivered(no_session, first_offset=50))  # events outside any session: ignored
    assert not svc._sessions and held(svc) == {}
    svc.process(delivered(session_forms(3), first_offset=0))
    touched = svc._sessions[("t1", "s1")].touched_ms
    svc.tick(touched + 1000)
    assert held(svc) == {(TOPIC, 0): 0}
    svc.tick(touched + 6000)
    assert held(svc) == {} and saves(svc, "idle") == 1
    svc.flush()  # the runtime's commit
    svc.tick(touched + 61_000)
    assert not svc._sessions
    svc.close()


def test_two_members_writing_one_session_lose_nothing(tmp_path: Path) -> None:
    """run-a's events go to one member, run-b's to another; each save merges the other's."""
    first, second = (service(tmp_path, every_n_events=5, at_step_end="false") for _ in range(2))
    forms = session_forms(40)
    for block in range(4):
        chunk = forms[block * 10 : block * 10 + 10]
        member, partition = (first, 0) if block % 2 == 0 else (second, 1)
        turn(member, delivered(chunk, first_offset=block * 10, partition=partition))
    first.close()
    second.close()
    stored = FileSessionStore(tmp_path / "sessions").load("t1", "s1")
    expected = AgentSession("t1", "s1")
    for form in forms:
        expected.apply(validate_json_form(form))
    assert stored is not None and stored.revision == 40
    assert stored.event_log == list(expected.events())
    assert stored.memory == expected.memory and stored.memory is not None
    conflicts = sum(
        m.context.registry.get_sample_value(
            "runtrail_sessions_save_conflicts_total", {"service": "sessions"}
        )
        or 0
        for m in (first, second)
    )
    assert conflicts >= 2


def test_a_corrupted_stored_snapshot_halts_its_session_and_holds_its_offsets(
    tmp_path: Path,
) -> None:
    store = FileSessionStore(tmp_path / "sessions")
    svc = service(tmp_path, every_n_events=2, at_step_end="false")
    turn(svc, delivered(session_forms(4), first_offset=0))
    svc.close()
    path = store.path_of("t1", "s1")
    path.write_bytes(path.read_bytes().replace(b'"a1"', b'"zz"'))
    before = path.read_bytes()

    svc = service(tmp_path, every_n_events=2, at_step_end="false")
    turn(svc, delivered(session_forms(8)[4:], first_offset=4))
    turn(svc, delivered(session_forms(2, session="s2"), first_offset=8))
    assert path.read_bytes() == before  # not overwritten
    assert held(svc) == {(TOPIC, 0): 4}  # kept for a re-read after the repair
    assert store.load("t1", "s2") is not None  # other sessions go on
    assert (
        svc.context.registry.get_sample_value("runtrail_sessions_halted", {"service": "sessions"})
        == 1
    )
    svc.close()


@pytest.mark.kafka
@pytest.mark.parametrize("blobs", ["s3", "file"])
def test_pointers_inline_and_large_snapshots_by_reference(
    kafka_bootstrap: str, tmp_path: Path, request: pytest.FixtureRequest, blobs: str
) -> None:
    """Large snapshots go by reference to an object store, or to a file:// folder (written
    without obstore: the default, with the services extra alone)."""
    blob_dir = tmp_path / "blobs"
    blob_url = request.getfixturevalue("s3_url") if blobs == "s3" else blob_dir.as_uri()
    base = "s3://runtrail-test/" if blobs == "s3" else blob_dir.as_uri() + "/"
    topic = create_topic(
        kafka_bootstrap, unique_topic("sessions"), partitions=1, **{"cleanup.policy": "compact"}
    )
    svc = service(
        tmp_path,
        kafka_bootstrap,
        sessions_topic=topic,
        publish_pointers="true",
        every_n_events=0,
        inline_limit_bytes=20_000,
        blob_url=blob_url,
    )
    small = session_forms(5, session="small")
    large = session_forms(10, session="large", payload=8000)
    try:
        svc.process(delivered(small, 0) + delivered(large, 5))  # both end on STEP_END
        svc.flush()
        store = FileSessionStore(tmp_path / "sessions")
        values = read_pointers(kafka_bootstrap, topic)

        inline = SessionPointer.from_bytes(values[session_key("t1", "small").encode()] or b"")
        assert inline.snapshot_ref is None and inline.revision == 5
        assert inline.resolve().digest == store.load("t1", "small").digest  # type: ignore[union-attr]

        ref = SessionPointer.from_bytes(values[session_key("t1", "large").encode()] or b"")
        stored = store.load("t1", "large")
        assert stored is not None and ref.snapshot is None and ref.size > 20_000
        assert ref.snapshot_ref is not None and ref.snapshot_ref.startswith(base)
        assert "secret" not in ref.snapshot_ref and "?" not in ref.snapshot_ref
        assert ref.digest == stored.digest
        assert ref.resolve(SnapshotBlobStore(blob_url)).digest == stored.digest
        if blobs == "file":
            blob = blob_dir / ref.snapshot_ref.removeprefix(base)
            assert not readable_by_others(blob) and not readable_by_others(blob.parent)
    finally:
        svc.close()


def test_a_batch_of_saves_fsyncs_each_folder_once_and_a_failed_fsync_blocks_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saves of one batch fsync their files each and their folder once, at the end. A
    folder fsync that fails (EIO: injected, nothing here can make a real disk do it on cue)
    leaves the folder due: ``flush``, which the runtime runs before every commit, raises
    ``StoreUnavailable`` until it succeeds, so no offset is committed past those saves."""
    import errno

    from runtrail.runtime.unavailable import StoreUnavailable
    from runtrail.sessions import store_file

    real = store_file.fsync_dir
    synced: list[Path] = []
    failing = {"on": False}

    def fsync_dir(path: Path) -> None:
        if failing["on"]:
            raise OSError(errno.EIO, "injected folder fsync failure", str(path))
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(store_file, "fsync_dir", fsync_dir)
    svc = service(tmp_path, every_n_events=1)
    forms = [
        f for session in ("a", "b", "c") for f in session_forms(2, session=session, seed=session)
    ]
    turn(svc, delivered(forms, first_offset=10))
    folder = tmp_path / "sessions" / "t1"
    assert synced.count(folder) == 1, synced  # six saves, one folder fsync
    assert held(svc) == {}

    failing["on"] = True
    turn(svc, delivered(session_forms(3, session="a", seed="a")[2:], first_offset=16))
    # saved (its file fsynced), but its folder is not durable yet: no commit may follow
    with pytest.raises(StoreUnavailable, match="injected folder fsync failure"):
        svc.flush()
    failing["on"] = False
    svc.flush()  # the folder is fsynced now: the commit may go
    assert synced.count(folder) == 2
    svc.close()


def test_an_option_under_its_old_name_is_an_error_naming_the_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=r"idle_checkpoint_s .* is now idle_save_s"):
        SessionsSettings.load({"idle_checkpoint_s": "5"})
    monkeypatch.setenv("RUNTRAIL_SESSIONS_IDLE_CHECKPOINT_S", "5")
    with pytest.raises(ValueError, match="RUNTRAIL_SESSIONS_IDLE_SAVE_S"):
        SessionsSettings.load({})
    monkeypatch.delenv("RUNTRAIL_SESSIONS_IDLE_CHECKPOINT_S")
    monkeypatch.setenv("RUNTRAIL_SESSIONS_IDLE_SAVE_S", "5")
    assert SessionsSettings.load({}).idle_save_s == 5.0
