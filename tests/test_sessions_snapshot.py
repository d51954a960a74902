"""Session snapshots and sessions, no I/O: the digest, the derivation rules, restore checks."""

from __future__ import annotations

import hashlib
import random

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import Event, validate_json_form
from runtrail.sessions import (
    CODE_VERSION,
    AgentSession,
    CorruptSnapshot,
    UntrustedSnapshot,
    parse_snapshot,
    seal,
)
from runtrail.sessions.event_log import EventLog
from runtrail.sessions.log_digest import LogDigest
from runtrail.sessions.snapshot import digest_of
from tests.sessions_support import built_session, built_snapshot, session_events, session_forms


def test_stored_form_is_the_rfc8785_canonical_form_and_the_digest_covers_it() -> None:
    snapshot = built_snapshot(40)
    document = snapshot.model_dump(mode="json", by_alias=True)
    assert snapshot.to_bytes() == rfc8785.dumps(document)
    content = {k: v for k, v in document.items() if k != "digest"}
    import hashlib

    assert snapshot.digest == "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    assert parse_snapshot(snapshot.to_bytes(), "memory").digest == snapshot.digest


def test_the_stored_form_spliced_at_seal_is_the_canonical_form_of_every_member() -> None:
    # seal() inserts the digest member into the content's members rather than canonicalising
    # again; members that look like it (nested "digest", "eventLog") must not move it
    decoy = {"digest": "sha256:" + "0" * 64, "eventLog": [], "codeVersion": "x"}
    snapshot = seal(
        tenant_id="t",
        session_id="s",
        last_applied_sequence={"r": 2},
        event_log=[],
        memory={"digest": "m", "zz": [decoy]},
        compact_results=[decoy],
        next_offsets={"events": {"0": 3}},
    )
    document = snapshot.model_dump(mode="json", by_alias=True)
    assert snapshot.to_bytes() == rfc8785.dumps(document)
    assert parse_snapshot(snapshot.to_bytes(), "memory").digest == snapshot.digest


def test_a_session_keeps_canonical_bytes_and_its_snapshot_reads_the_forms_from_them() -> None:
    session = built_session(30)
    snapshot = session.snapshot()
    assert isinstance(snapshot.event_log, EventLog)
    assert snapshot.event_log._forms is None  # a save reads none of them
    forms = [e.json_form() for e in sorted(session_events(30), key=_order)]
    assert snapshot.event_log == forms and list(snapshot.event_log) == forms
    assert snapshot.event_log[-1] == forms[-1] and len(snapshot.event_log) == 30
    assert list(session.events()) == forms
    from_forms = seal(
        tenant_id="t1",
        session_id="s1",
        last_applied_sequence=snapshot.last_applied_sequence,
        event_log=forms,
        memory=snapshot.memory,
        compact_results=snapshot.compact_results,
        memory_from=snapshot.memory_from,
        next_offsets=snapshot.next_offsets,
    )
    assert from_forms.to_bytes() == snapshot.to_bytes()
    assert snapshot.model_dump(by_alias=True)["eventLog"] == forms
    with pytest.raises(ValueError, match="not an object"):
        seal(tenant_id="t", session_id="s", last_applied_sequence={}, event_bytes=[b"[1]"])


def _order(event: Event) -> tuple[str, str, int]:
    return (event.recorded_at or event.occurred_at, event.run_id, event.sequence)


def test_snapshot_holds_memory_log_compact_results_ids_sequences_and_code_version() -> None:
    snapshot = built_snapshot(30)
    assert (snapshot.tenant_id, snapshot.session_id) == ("t1", "s1")
    assert snapshot.code_version == CODE_VERSION
    assert snapshot.revision == len(snapshot.event_log) == 30
    assert snapshot.last_applied_sequence == {"run-a": 20, "run-b": 10}
    # the last session.snapshot event of the log (index 27, run-a's 18th) gives the memory
    assert snapshot.memory_from is not None
    assert (snapshot.memory_from.run_id, snapshot.memory_from.sequence) == ("run-a", 18)
    assert snapshot.memory == {"turns": 27, "notes": [f"n{i}" for i in range(27 % 7)]}
    assert snapshot.compact_results == [{"step": 27, "summary": "s27"}]
    assert snapshot.next_offsets == {"events": {"0": 30}}


def test_the_memory_is_found_however_the_session_was_built() -> None:
    """Applied, merged from another snapshot or restored: each session knows whether it
    holds a ``session.snapshot`` event (it skips the pass over its log when it holds none),
    and every way of building it gives the same memory."""
    whole = built_snapshot(30)
    assert whole.memory is not None
    merged = AgentSession("t1", "s1")
    merged.merge(whole)
    restored = AgentSession.from_snapshot(whole)
    for session in (merged, restored):
        again = session.snapshot()
        assert (again.memory, again.memory_from) == (whole.memory, whole.memory_from)
        assert again.digest == whole.digest
    none = built_snapshot(6)  # before the first session.snapshot event (the 7th)
    assert none.memory is None and none.memory_from is None
    assert AgentSession.from_snapshot(none).snapshot().memory is None


def test_any_changed_byte_of_content_is_refused_with_the_place_named() -> None:
    data = built_snapshot(12).to_bytes()
    for old, new in (
        (b'"a1"', b'"a2"'),
        (b'"turns":6', b'"turns":5'),
        (b'"run-b":2', b'"run-b":3'),
    ):
        assert old in data
        with pytest.raises(CorruptSnapshot, match="digest mismatch") as caught:
            parse_snapshot(data.replace(old, new, 1), "/var/sessions/t1/s1.json")
        assert caught.value.where == "/var/sessions/t1/s1.json"
    with pytest.raises(CorruptSnapshot, match="not JSON"):
        parse_snapshot(data[: len(data) // 2], "half")


def test_the_session_is_a_function_of_its_event_set() -> None:
    events = session_events(60)
    reference = built_session(60).snapshot()
    rng = random.Random(3)
    for _ in range(3):
        shuffled = events + rng.sample(events, 20)  # re-deliveries
        rng.shuffle(shuffled)
        session = AgentSession("t1", "s1")
        for event in shuffled:
            session.apply(event, source=("events", 0, 59))
        assert session.snapshot().digest == reference.digest


def test_snapshot_plus_tail_equals_the_whole_and_merge_is_a_union() -> None:
    events = session_events(50)
    whole = built_session(50).snapshot()
    for cut in (0, 1, 17, 49, 50):
        restored = (
            AgentSession.from_snapshot(built_snapshot(cut)) if cut else AgentSession("t1", "s1")
        )
        for offset, event in enumerate(events):  # the tail is read again from the snapshot's offset
            if offset >= cut:
                restored.apply(event, source=("events", 0, offset))
        assert restored.snapshot().digest == whole.digest
    left, right = AgentSession("t1", "s1"), AgentSession("t1", "s1")
    for offset, event in enumerate(events):
        (left if event.run_id == "run-a" else right).apply(event, source=("events", 0, offset))
    assert left.merge(right.snapshot()) == right.revision
    assert left.snapshot().digest == whole.digest
    assert left.merge(whole) == 0


def test_restore_refuses_what_it_must_not_build_on() -> None:
    snapshot = built_snapshot(20)
    with pytest.raises(UntrustedSnapshot, match="cannot restore"):
        AgentSession("t1", "other").restore(snapshot)
    with pytest.raises(UntrustedSnapshot, match="restore session t2/s1"):
        AgentSession("t2", "s1").restore(snapshot)
    older = seal(
        tenant_id="t1",
        session_id="s1",
        last_applied_sequence=snapshot.last_applied_sequence,
        event_log=snapshot.event_log,
        memory=snapshot.memory,
        compact_results=snapshot.compact_results,
        memory_from=snapshot.memory_from,
        code_version="runtrail.sessions/0",
    )
    with pytest.raises(UntrustedSnapshot, match=r"runtrail\.sessions/0"):
        AgentSession.from_snapshot(older)
    lying = seal(  # a correctly sealed snapshot whose memory is not its log's
        tenant_id="t1",
        session_id="s1",
        last_applied_sequence=snapshot.last_applied_sequence,
        event_log=snapshot.event_log,
        memory={"invented": True},
        compact_results=snapshot.compact_results,
        memory_from=snapshot.memory_from,
    )
    with pytest.raises(UntrustedSnapshot, match="disagrees"):
        AgentSession.from_snapshot(lying)


def test_events_of_another_session_or_tenant_are_refused() -> None:
    session = AgentSession("t1", "s1")
    with pytest.raises(ValueError, match="belongs to t2/s1"):
        session.apply(session_events(1, tenant="t2")[0])
    with pytest.raises(ValueError, match="belongs to t1/s9"):
        session.apply(session_events(1, session="s9")[0])
    assert session.revision == 0


def test_an_inline_pointer_reads_back_as_the_snapshot_it_splices_in() -> None:
    """The sessions topic's inline pointer splices the stored bytes in unparsed: a reader gets
    the pointer a parsed copy would have given, and it resolves to the same snapshot, also for
    values whose canonical text differs from orjson's (1e+21, U+2028, the largest safe integer)."""
    import orjson

    from runtrail.sessions.pointer import SessionPointer, pointer_message

    odd = seal(
        tenant_id="t1",
        session_id="odd",
        last_applied_sequence={"r1": 3},
        event_log=[],
        memory={"big": 1e21, "small": 1e-7, "text": 'é\u2028"\\', "int": 2**53 - 1, "f": 0.1},
        compact_results=[None, True, -0.0],
    )
    for snapshot in (built_snapshot(1), built_snapshot(30), odd):
        data = snapshot.to_bytes()
        message = pointer_message(snapshot, data, inline_limit=len(data), blobs=None)
        assert not message.by_reference
        read = SessionPointer.from_bytes(message.value)
        parsed = SessionPointer(
            tenant_id=snapshot.tenant_id,
            session_id=snapshot.session_id,
            revision=snapshot.revision,
            digest=snapshot.digest,
            code_version=snapshot.code_version,
            last_applied_sequence=snapshot.last_applied_sequence,
            size=len(data),
            snapshot=orjson.loads(data),
        )
        assert read == parsed and message.key == parsed.key
        assert read.resolve().to_bytes() == data
    with pytest.raises(ValueError, match="over the inline limit"):
        pointer_message(odd, odd.to_bytes(), inline_limit=10, blobs=None)


def test_seal_checks_the_log_it_does_not_validate_again() -> None:
    """``seal`` validates every field but the log, whose canonicalisation proved it JSON; an
    item that is not an object is still refused, and a sealed snapshot equals its parsed copy."""
    sealed = built_snapshot(12)
    parsed = parse_snapshot(sealed.to_bytes(), "memory")
    assert parsed.model_dump() == sealed.model_dump()
    with pytest.raises(ValueError, match="an event of the log is not an object"):
        seal(tenant_id="t1", session_id="s1", last_applied_sequence={}, event_log=[[1]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tenantId"):
        seal(tenant_id="", session_id="s1", last_applied_sequence={}, event_log=[])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_digest_carried_from_save_to_save_is_that_of_the_whole_content(
    data: st.DataObject,
) -> None:
    """A session hashes only what its log gained since its last snapshot; events arriving
    in any order, recorded at any time (so that an insertion reorders what was hashed), and
    snapshots taken at any point give the digest of the whole content, every time."""
    forms = session_forms(36, snapshot_every=data.draw(st.sampled_from([0, 5])))
    for form in forms:  # recording times out of step with sequences: merges reorder the log
        form["recordedAt"] = f"2026-11-29T10:00:{data.draw(st.integers(0, 9)):02d}.000Z"
    order = data.draw(st.permutations(range(len(forms))))
    session = AgentSession("t1", "s1")
    applied: list[Event] = []
    for index in order:
        event = validate_json_form(forms[index])
        session.apply(event, source=("events", 0, index))
        applied.append(event)
        if data.draw(st.booleans()):
            snapshot = session.snapshot()
            assert snapshot.digest == digest_of(snapshot.content_bytes())
            fresh = AgentSession("t1", "s1")
            for offset, again in zip(order, applied, strict=False):
                fresh.apply(again, source=("events", 0, offset))
            assert fresh.snapshot().to_bytes() == snapshot.to_bytes()
    assert parse_snapshot(session.snapshot().to_bytes(), "memory").revision == len(forms)


def test_a_digest_state_is_not_resumed_over_events_that_moved() -> None:
    log_digest = LogDigest()
    head, tail = b'{"eventLog":[', b"]}"
    whole = lambda events: hashlib.sha256(head + b",".join(events) + tail).hexdigest()  # noqa: E731
    a, b, c, d = b'{"a":1}', b'{"b":2}', b'{"c":3}', b'{"d":4}'
    for events in ([a, b, c], [a, b, c, d], [b, a, c, d], [b, a, c, d], [d], []):
        assert log_digest.digest(head, list(events), tail) == whole(events), events
    assert (
        log_digest.digest(b'{"x":0,"eventLog":[', [a], tail)
        == hashlib.sha256(b'{"x":0,"eventLog":[' + a + tail).hexdigest()
    )
