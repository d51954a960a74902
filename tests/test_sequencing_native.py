"""The compiled sequence checker and the compiled batch loop give the Python path's answers.

``runtrail_native.SequenceState`` must return the same verdict as
:class:`~runtrail.runtime.sequencing.SequenceChecker` for every call, from the same history
(window eviction, runs capped per partition, partitions dropped); ``EventDecoder.decode_run``
must leave ``BatchDecoder.decode_batch`` with the same delivered events, positions, counts
and dead letters as the Python loop, whatever stops it (errors, refusals, poison, verdicts).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.events import EventCodec
from runtrail.events.limits import EventLimits
from runtrail.events.native import NATIVE
from runtrail.runtime import sequencing
from runtrail.runtime.decoding import BatchDecoder
from runtrail.runtime.sequencing import SequenceChecker, Verdict, new_sequence_checker
from tests.examples import examples
from tests.support import form

if NATIVE is None:  # never a skip: the suite is run with the extension (make install)
    pytest.fail(
        "runtrail_native is not installed (or RUNTRAIL_NATIVE=off): "
        "`pip install ./shared/runtrail_native` builds it",
        pytrace=False,
    )

VERDICTS = [Verdict.NEXT, Verdict.GAP, Verdict.DUPLICATE, Verdict.REORDERED, Verdict.CONFLICT]

# few keys and sequences, so that windows fill, runs are evicted and IDs collide
_run = (st.integers(0, 1), st.sampled_from(["t1", "t2"]), st.sampled_from(["r1", "r2", "r3"]))
_check = st.tuples(st.just("check"), *_run, st.integers(1, 9), st.sampled_from(["e1", "e2"]))
_holder = st.tuples(st.just("holder"), *_run, st.integers(1, 9))
_drop = st.tuples(st.just("drop"), st.lists(st.integers(0, 1), max_size=2))


@settings(max_examples=examples(400), deadline=None)
@given(
    window=st.integers(1, 5),
    max_runs=st.integers(1, 12),
    ops=st.lists(st.one_of(_check, _check, _check, _check, _holder, _drop), max_size=200),
)
def test_native_checker_gives_the_python_verdicts(
    window: int, max_runs: int, ops: list[tuple[Any, ...]]
) -> None:
    assert NATIVE is not None
    with pytest.MonkeyPatch.context() as patched:  # the Python checker reads the module's bounds
        patched.setattr(sequencing, "WINDOW", window)
        patched.setattr(sequencing, "MAX_RUNS_PER_PARTITION", max_runs)
        python = SequenceChecker()
        native = NATIVE.SequenceState(VERDICTS, window, max_runs)
        for op in ops:
            kind, *args = op
            assert getattr(native, kind)(*args) == getattr(python, kind)(*args), op


def test_eviction_is_oldest_first_and_a_run_evicted_starts_again() -> None:
    """Fails if runs were evicted in any other order than first inserted."""
    assert NATIVE is not None
    native = NATIVE.SequenceState(VERDICTS, 4, 10)
    for run in range(10):
        assert native.check(0, "t", f"r{run}", 1, f"e{run}") is Verdict.NEXT
    native.check(0, "t", "r10", 1, "e10")  # the eleventh run evicts r0 (a tenth of ten)
    assert native.holder(0, "t", "r0", 1) is None
    assert native.holder(0, "t", "r1", 1) == "e1"
    assert native.check(0, "t", "r0", 5, "x") is Verdict.NEXT  # forgotten: first seen again


def test_the_runtime_uses_the_compiled_checker_and_loop() -> None:
    checker = new_sequence_checker()
    assert isinstance(checker, NATIVE.SequenceState)
    decoder = BatchDecoder(EventCodec(), checker, lambda *a: None, with_written=False)
    assert decoder._run_native is not None
    written = BatchDecoder(EventCodec(), checker, lambda *a: None, with_written=True)
    assert written._run_native is None  # the written form is the Python path's


# --- the compiled batch loop against the Python loop ---------------------------------------
CODEC = EventCodec()
TS = (1, 1_764_410_400_123)


def _msg(value: bytes | None, offset: int, partition: int = 0, **kw: Any) -> Message:
    ts = kw.pop("timestamp", (TS[0], TS[1] + offset // 3))
    return Message(
        topic="events", partition=partition, offset=offset, key=b"k", value=value,
        timestamp=ts, **kw,
    )  # fmt: skip


def _value(run: str, sequence: int, event_id: str, **kw: Any) -> bytes:
    return CODEC.encode_json_form(form(run_id=run, sequence=sequence, eventId=event_id, **kw))


def _messages() -> list[Message]:
    """Every way the compiled loop stops, between runs of ordinary events."""
    out: list[Message] = []
    values = [
        _value("r1", 1, "a1"),
        _value("r1", 2, "a2"),
        _value("r2", 1, "b1"),
        b"\xc3\x01not an event",  # poison: the Python path says why
        _value("r1", 3, "a3"),
        _value("r1", 3, "a3"),  # a duplicate: skipped
        _value("r1", 3, "other"),  # a conflict: dead-lettered
        _value("r1", 6, "a6"),  # a gap: delivered, counted
        _value("r1", 5, "a5"),  # reordered: delivered, counted
        _value("r2", 2, "b2", data={"message": "x" * 5000, "raw": None}),  # too large
        _value("r2", 2, "b2"),
        _value("r3", 1, "c1", type="run.accepted", data={"goalRef": "g", "policyVersion": "p"}),
    ]
    for offset, value in enumerate(values):  # a run's events share a partition
        out.append(_msg(value, offset, partition=0 if b"r1" in value else 1))
    out.insert(4, _msg(None, 99, error=KafkaError(KafkaError._PARTITION_EOF)))
    out.append(_msg(_value("r4", 1, "d1"), 50, timestamp=(0, 0)))  # no broker time
    deep: list[Any] = []
    for _ in range(70):  # deeper than the limit below: walked, refused as too deep
        deep = [deep]
    out.append(_msg(_value("r4", 2, "d2", data={"message": "deep", "raw": deep}), 51))
    return out


def _run(native: bool) -> tuple[Any, list[tuple[Any, ...]]]:
    dead: list[tuple[Any, ...]] = []
    checker = new_sequence_checker() if native else SequenceChecker()

    def sink(msg: Message, reason: str, detail: str, extra: Any = None) -> None:
        dead.append((msg.offset(), reason))

    decoder = BatchDecoder(
        CODEC, checker, sink, EventLimits(max_event_bytes=4000, max_json_depth=64),
        with_headers=sink, with_written=False,
    )  # fmt: skip
    assert (decoder._run_native is not None) is native
    messages = _messages()
    first = decoder.decode_batch(messages[:9])
    second = decoder.decode_batch(messages[9:])
    return (first, second), dead


def _plain(result: Any) -> tuple[Any, ...]:
    delivered = [
        (d.event.json_form(), d.written, d.topic, d.partition, d.offset, d.timestamp_ms, d.key,
         d.message.offset() if d.message else None)
        for d in result.delivered
    ]  # fmt: skip
    return delivered, result.positions, result.consumed, result.dead, result.anomalies


def test_the_compiled_loop_leaves_what_the_python_loop_leaves() -> None:
    (a1, a2), dead_native = _run(native=True)
    (b1, b2), dead_python = _run(native=False)
    assert _plain(a1) == _plain(b1)
    assert _plain(a2) == _plain(b2)
    assert dead_native == dead_python
    # the history above reaches every outcome, so equality means something
    reasons = {reason for _, reason in dead_python}
    assert {"sequence-conflict", "too-large", "too-deep"} <= reasons and len(reasons) >= 4
    anomalies = {**b1.anomalies, **b2.anomalies}
    assert {"duplicate", "conflict", "gap", "reordered"} <= set(anomalies)
    assert len(b1.delivered) + len(b2.delivered) >= 8
