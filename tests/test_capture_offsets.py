"""Commit points (held offsets and their metadata), resume, idle expiry, revoked partitions."""

from __future__ import annotations

import random

import pytest

from runtrail.capture import Hold, NodeIoRecord, NodePairer
from runtrail.capture.holds import decode_marks, encode_marks
from runtrail.events import Event
from tests.capture_support import T0_MS, RunEvents, drain, feed_all, model_step, prompt


def test_held_offset_is_the_first_offset_of_the_oldest_open_node_per_partition() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    pairer = NodePairer()
    pairer.feed(a.request(prompt()), 0, 10)
    pairer.feed(b.request(prompt()), 1, 7)
    pairer.feed(a.call("c1", "calc", {}), 0, 11)
    assert pairer.held_offsets() == {0: 10, 1: 7}
    pairer.feed(a.step_end(), 0, 12)  # the model node closes; the tool call still holds 11
    assert pairer.held_offsets() == {0: 11, 1: 7}
    pairer.feed(a.result("c1", "calc", 2), 0, 13)
    assert pairer.held_offsets() == {1: 7}
    pairer.feed(b.step_end(), 1, 8)
    assert pairer.held_offsets() == {}
    assert pairer.holds() == {}


def test_a_closed_node_straddling_the_commit_point_is_named_in_the_metadata() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    pairer = NodePairer()
    pairer.feed(a.call("c1", "calc", {}), 0, 0)  # A: 0..3
    pairer.feed(b.request(prompt()), 0, 1)  # B: opens at 1, stays open
    pairer.feed(a.step_end(), 0, 2)
    pairer.feed(a.result("c1", "calc", 2), 0, 3)
    assert pairer.holds() == {0: Hold(1, encode_marks(1, [3]))}
    assert decode_marks(1, pairer.holds()[0].metadata) == [3]
    pairer.feed(b.step_end(), 0, 4)
    assert pairer.holds() == {}


def test_a_straddling_model_node_needs_no_mark_unless_its_request_is_re_read() -> None:
    """Only MODEL_REQUEST opens a node: a re-read tail without it forms nothing."""
    a, b = RunEvents("run-a"), RunEvents("run-b")
    pairer = NodePairer()
    pairer.feed(a.request(prompt()), 0, 0)  # A: 0..3
    pairer.feed(b.request(prompt()), 0, 1)  # B: opens at 1, stays open
    pairer.feed(a.response("x"), 0, 2)
    pairer.feed(a.step_end(), 0, 3)
    assert pairer.holds() == {0: Hold(1, "")}


def test_nodes_inside_the_held_range_need_no_marks() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    pairer = NodePairer()
    pairer.feed(a.request(prompt()), 0, 5)
    pairer.feed(b.call("c1", "t", {}), 0, 6)
    pairer.feed(b.result("c1", "t", 1), 0, 7)
    pairer.feed(RunEvents("run-c").result("x", "t", 1), 0, 8)  # an orphan holds nothing
    assert pairer.holds() == {0: Hold(5, "")}


def test_metadata_round_trips_and_foreign_metadata_has_no_marks() -> None:
    assert decode_marks(100, encode_marks(100, [100, 135, 5000])) == [100, 135, 5000]
    assert encode_marks(7, []) == ""
    assert decode_marks(7, "") == []
    assert decode_marks(7, None) == []
    assert decode_marks(7, "written by someone else") == []
    with pytest.raises(ValueError, match="corrupt"):
        decode_marks(7, "rtc1:zz,??")


def _interleaved_runs(seed: int, runs: int = 6) -> list[Event]:
    """Several runs' steps interleaved at random, as one partition would carry them."""
    rng = random.Random(seed)
    scripts: list[list[Event]] = []
    for index in range(runs):
        run = RunEvents(f"run-{index}", tenant=rng.choice(["acme", "globex"]))
        script: list[Event] = []
        for step in range(1, rng.randint(2, 5)):
            script += [run.request(prompt(text=f"q{step}"), step=step)]
            if rng.random() < 0.3:
                script += [run.retry(1, "busy", step=step), run.request(prompt(), step=step)]
            script += [run.response(f"part{i}", step=step) for i in range(rng.randint(0, 3))]
            script += [run.response("end", {"usage": {"input": 3, "output": 1}}, step=step)]
            if rng.random() < 0.6:
                script += [run.call(f"c{step}", "calc", {"s": step}, step=step)]
                script += [run.result(f"c{step}", "calc", step, step=step)]
            if rng.random() < 0.4:
                script += [run.call(None, None, {"n": 1}, step=step)]
                script += [run.call(None, None, {"n": 2}, step=step)]
                script += [run.result(None, None, 1, step=step)]
                script += [run.result(None, None, 2, step=step)]
            script += [run.step_end(step=step)]
        if rng.random() < 0.5:
            script += [run.result("orphan", "external", "x", step=99)]
        scripts.append(script)
    stream: list[Event] = []
    while any(scripts):
        script = rng.choice([s for s in scripts if s])
        stream.append(script.pop(0))
    return stream


def _run_with_crashes(
    stream: list[Event], seed: int, crashes: int, use_metadata: bool = True
) -> list[NodeIoRecord]:
    """Consume like the runtime: flush, commit at the hold; crash and resume from the commit."""
    rng = random.Random(seed)
    crash_points = sorted(rng.sample(range(1, len(stream)), crashes))
    written: list[NodeIoRecord] = []
    committed = Hold(0, "")
    for crash_at in [*crash_points, len(stream)]:
        pairer = NodePairer()  # a fresh process: no state survives the crash
        if use_metadata:
            pairer.resume(0, committed.offset, committed.metadata)
        position = committed.offset
        while position < crash_at:
            written.extend(pairer.feed(stream[position], 0, position, now_ms=0))
            position += 1
            if rng.random() < 0.3:  # the sink is flushed: commit
                committed = pairer.holds().get(0, Hold(position, ""))
    written.extend(drain(pairer))
    return written


@pytest.mark.parametrize("seed", range(30))
def test_crash_and_resume_recaptures_exactly_the_same_records(seed: int) -> None:
    stream = _interleaved_runs(seed)
    expected = {r.record_id: r for r in feed_all(NodePairer(), stream)}
    written = _run_with_crashes(stream, seed, crashes=6)
    assert {r.record_id for r in written} == set(expected)
    for record in written:  # duplicates are identical, never partial re-formations
        assert record == expected[record.record_id]


def test_without_the_commit_metadata_a_restart_would_capture_truncated_nodes() -> None:
    """Guards the metadata: some seed must show the naive resume going wrong."""
    failures = 0
    for seed in range(30):
        stream = _interleaved_runs(seed)
        expected = {r.record_id for r in feed_all(NodePairer(), stream)}
        written = _run_with_crashes(stream, seed, crashes=6, use_metadata=False)
        failures += not {r.record_id for r in written} <= expected
    assert failures > 0


def test_the_commit_point_advances_while_runs_overlap() -> None:
    """Busy partitions nearly always have some node open; commits must still move forward."""
    stream = _interleaved_runs(3, runs=12)
    pairer = NodePairer()
    holds = []
    for offset, event in enumerate(stream):
        pairer.feed(event, 0, offset, now_ms=0)
        holds.append(pairer.holds().get(0, Hold(offset + 1, "")))
    offsets = [h.offset for h in holds]
    assert offsets == sorted(offsets)
    assert max(offsets) > len(stream) * 3 // 4
    overlapped = [h for h in holds if h.metadata]  # commit points inside closed nodes' spans
    assert len({h.offset for h in overlapped}) > 5


def test_resume_drops_the_tail_of_a_straddling_model_node() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    stream = [
        a.request(prompt()),  # 0
        b.request(prompt()),  # 1
        a.response("A"),  # 2
        a.step_end(),  # 3: A closed (and written) before the commit
        b.response("B"),  # 4
        b.step_end(),  # 5
    ]
    pairer = NodePairer()
    feed_all(pairer, stream[:4])
    hold = pairer.holds()[0]
    assert hold.offset == 1

    resumed = NodePairer()
    resumed.resume(0, hold.offset, hold.metadata)
    records = feed_all(resumed, stream[1:], start_offset=1) + drain(resumed)
    assert [r.run_id for r in records] == ["run-b"]
    assert records[0].inputs == prompt()
    assert resumed.dropped == {"no-open-request": 1}  # A's response: its request came before


def test_resume_skips_the_result_of_a_straddling_tool_node() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    stream = [
        a.call(None, None, {"n": 1}),  # 0: anon call 1
        b.request(prompt()),  # 1
        a.call(None, None, {"n": 2}),  # 2: anon call 2, same key
        a.result(None, None, "one"),  # 3: pairs with call 1
        a.result(None, None, "two"),  # 4
        b.step_end(),  # 5
    ]
    expected = feed_all(NodePairer(), stream)
    pairer = NodePairer()
    feed_all(pairer, stream[:4])
    hold = pairer.holds()[0]
    assert hold.offset == 1

    resumed = NodePairer()
    resumed.resume(0, hold.offset, hold.metadata)
    records = feed_all(resumed, stream[1:], start_offset=1) + drain(resumed)
    assert {r.record_id for r in records} < {r.record_id for r in expected}
    [two] = [r for r in records if r.node_type == "TOOL"]
    assert (two.inputs["arguments"], two.outputs["output"]) == ({"n": 2}, "two")


def test_pending_marks_are_carried_into_the_next_commit() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    stream = [a.call("a", "t", {}), b.call("c", "t", {}), a.step_end(), a.result("a", "t", 1)]
    pairer = NodePairer()
    feed_all(pairer, stream)  # A spans 0..3, B's call holds 1
    hold = pairer.holds()[0]
    resumed = NodePairer()
    resumed.resume(0, hold.offset, hold.metadata)
    resumed.feed(stream[1], 0, 1)  # crash again before reaching the mark at 3
    again = resumed.holds()[0]
    assert again.offset == 1
    assert decode_marks(again.offset, again.metadata) == [3]


def test_oversized_metadata_keeps_the_previous_commit_point() -> None:
    runs = [RunEvents(f"run-{i}") for i in range(3)]
    pairer = NodePairer()
    pairer.feed(runs[0].call("c", "t", {}), 0, 0)
    pairer.feed(runs[1].call("c", "t", {}), 0, 1)
    pairer.feed(runs[2].call("c", "t", {}), 0, 2)
    pairer.feed(runs[0].result("c", "t", 0), 0, 3)
    first = pairer.holds(max_metadata=7)[0]
    assert first == Hold(1, encode_marks(1, [3]))
    pairer.feed(runs[1].result("c", "t", 1), 0, 4)
    assert len(encode_marks(2, [3, 4])) > 7
    assert pairer.holds(max_metadata=7) == {0: first}  # still valid, just older
    assert pairer.holds() == {0: Hold(2, encode_marks(2, [3, 4]))}


def test_expired_straddler_tail_is_dropped_on_resume() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    stream = [a.request(prompt()), b.request(prompt()), a.response("A"), b.step_end()]
    pairer = NodePairer()
    pairer.feed(stream[0], 0, 0, now_ms=0)
    pairer.feed(stream[1], 0, 1, now_ms=900)
    pairer.feed(stream[2], 0, 2, now_ms=100)
    [expired] = pairer.expire_idle(now_ms=1_000, idle_ms=800)
    assert (expired.run_id, expired.incomplete) == ("run-a", True)
    hold = pairer.holds()[0]
    assert hold == Hold(1, "")  # A's re-read tail has no request: it forms nothing

    resumed = NodePairer()
    resumed.resume(0, hold.offset, hold.metadata)
    records = feed_all(resumed, stream[1:], start_offset=1) + drain(resumed)
    assert [r.run_id for r in records] == ["run-b"]
    assert resumed.open_nodes() == 0


def test_idle_nodes_are_expired_as_incomplete_records() -> None:
    run = RunEvents()
    pairer = NodePairer(clock=lambda: 0)
    request = run.request(prompt())
    delta = run.response("partial")
    call = run.call("c1", "calc", {"x": 1}, step=2)
    pairer.feed(request, 0, 0, now_ms=1_000)
    pairer.feed(delta, 0, 1, now_ms=1_500)
    pairer.feed(call, 0, 2, now_ms=1_800)

    assert pairer.expire_idle(now_ms=2_500, idle_ms=1_000) == []
    [model] = pairer.expire_idle(now_ms=2_501, idle_ms=1_000)
    assert model.incomplete is True
    assert model.node_type == "MODEL"
    assert model.output_text == "partial"
    assert model.source_event_ids == (request.event_id, delta.event_id)
    assert model.started_at_epoch_ms == T0_MS
    assert model.captured_at_epoch_ms == T0_MS + 100  # the last event's time, not the clock
    assert pairer.held_offsets() == {0: 2}

    [tool] = pairer.expire_idle(now_ms=10_000, idle_ms=1_000)
    assert tool.incomplete is True
    assert tool.inputs == {"callId": "c1", "toolName": "calc", "arguments": {"x": 1}, "type": None}
    assert tool.outputs is None
    assert pairer.open_nodes() == 0
    assert pairer.held_offsets() == {}

    # The late step end finds nothing open: no second record of the expired node.
    assert pairer.feed(run.step_end(), 0, 3, now_ms=10_001) == []


def test_idle_clock_defaults_to_the_injected_clock() -> None:
    now = [0]
    pairer = NodePairer(clock=lambda: now[0])
    pairer.feed(RunEvents().request(prompt()), 0, 0)
    now[0] = 5_000
    assert pairer.expire_idle(now_ms=5_000, idle_ms=5_000) == []
    assert len(pairer.expire_idle(now_ms=5_000, idle_ms=4_999)) == 1


def test_revoked_partitions_are_forgotten() -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    pairer = NodePairer()
    pairer.feed(a.request(prompt()), 0, 0)
    pairer.feed(b.request(prompt()), 1, 0)
    pairer.drop_partitions([1])
    assert pairer.held_offsets() == {0: 0}
    assert pairer.open_nodes() == 1
    assert pairer.feed(b.step_end(), 1, 1) == []
    [record] = pairer.feed(a.step_end(), 0, 1)
    assert record.run_id == "run-a"


def test_a_model_step_holds_until_its_step_end() -> None:
    pairer = NodePairer()
    events = model_step(RunEvents())
    for offset, event in enumerate(events[:-1]):
        pairer.feed(event, 2, 100 + offset)
        assert pairer.held_offsets() == {2: 100}
    pairer.feed(events[-1], 2, 102)
    assert pairer.held_offsets() == {}


def test_a_resumed_partition_with_nothing_read_yet_keeps_its_commit_point() -> None:
    pairer = NodePairer()
    pairer.resume(0, 500, encode_marks(500, [503, 510]))
    pairer.resume(1, 700, "")
    assert pairer.holds() == {0: Hold(500, encode_marks(500, [503, 510]))}
    pairer.feed(RunEvents().step_end(), 0, 500)
    assert pairer.holds() == {0: Hold(501, encode_marks(501, [503, 510]))}
