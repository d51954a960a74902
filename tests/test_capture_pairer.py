"""Seed 000 §1 pairing and accumulation rules, event by event."""

from __future__ import annotations

from runtrail.capture import NodePairer
from runtrail.capture.times import epoch_ms
from tests.capture_support import T0_MS, RunEvents, feed_all, iso, model_step, prompt


def test_model_node_is_flushed_at_step_end_with_the_full_field_map() -> None:
    run = RunEvents()
    pairer = NodePairer()
    raw = {"id": "resp-1", "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    request = run.request(prompt())
    response = run.response("4", raw)
    end = run.step_end()

    assert pairer.feed(request, 0, 0) == []
    assert pairer.feed(response, 0, 1) == []
    [record] = pairer.feed(end, 0, 2)

    assert record.node_type == "MODEL"
    assert record.node_id == "model@run-1|t1|1"
    assert (record.tenant_id, record.run_id, record.session_id) == ("acme", "run-1", "sess-1")
    assert (record.turn_id, record.step) == ("t1", 1)
    assert record.model_id == "glm-5.1"
    assert record.inputs == prompt()
    assert record.output_text == "4"
    assert record.outputs == raw
    assert record.started_at_epoch_ms == T0_MS
    assert record.captured_at_epoch_ms == T0_MS + 200
    assert record.duration_ms == 200
    assert (record.input_tokens, record.output_tokens) == (12, 3)
    assert record.reasoning_text == ""
    assert record.retry_count == 0
    assert record.source_event_ids == (request.event_id, response.event_id, end.event_id)
    assert record.incomplete is False


def test_streamed_deltas_concatenate_text_and_keep_the_raw_payload_of_the_last_only() -> None:
    run = RunEvents()
    final_raw = {"id": "resp-1", "choices": [{"text": "Hello, world!"}]}
    events = [
        run.request(prompt()),
        run.response("Hel"),
        run.response("lo, "),
        run.response("world"),
        run.response("!", final_raw),
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert record.output_text == "Hello, world!"
    assert record.outputs == final_raw


def test_outputs_are_overwritten_by_the_latest_non_empty_raw_never_concatenated() -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.response("a", {"chunk": 1}),
        run.response("b", {"chunk": 2}),
        run.response("c", {}),  # empty: does not overwrite
        run.response("d", ""),
        run.response("e", None),
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert record.outputs == {"chunk": 2}
    assert record.output_text == "abcde"


def test_reasoning_segments_are_joined_with_newlines() -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.reasoning("First, read the question."),
        run.reasoning("Then add."),
        run.reasoning("2+2=4"),
        run.response("4"),
        run.step_end(),
    ]
    [record] = feed_all(NodePairer(), events)
    assert record.reasoning_text == "First, read the question.\nThen add.\n2+2=4"


def test_model_retries_are_counted_and_a_re_sent_request_restarts_the_node() -> None:
    run = RunEvents()
    retried = prompt(text="What is 2+2? Answer briefly.")
    first = run.request(prompt())
    events = [
        first,
        run.response("partial "),
        run.retry(1, "HTTP 529"),
        run.retry(2, "timeout"),
        run.request(retried),
        run.response("4"),
        run.step_end(),
    ]
    pairer = NodePairer()
    [record] = feed_all(pairer, events)
    assert record.retry_count == 2  # kept across the restart (runtrail's SDK re-sends)
    assert record.inputs == retried
    assert record.output_text == "4"  # never the superseded call's text
    assert first.event_id not in record.source_event_ids
    assert record.started_at_epoch_ms == T0_MS + 400  # the node restarted with the request
    assert pairer.dropped == {"superseded-request": 4}


def test_model_id_comes_from_the_prompt_model_and_is_none_without_one() -> None:
    run = RunEvents()
    events = [
        run.request({"messages": []}, step=1),
        run.step_end(step=1),
        run.request("plain text prompt", step=2),
        run.step_end(step=2),
        run.request(prompt(model="claude-x"), step=3),
        run.step_end(step=3),
    ]
    records = feed_all(NodePairer(), events)
    assert [r.model_id for r in records] == [None, None, "claude-x"]
    assert records[1].inputs == "plain text prompt"


def test_tool_node_is_flushed_at_tool_result_with_call_as_input_and_result_as_output() -> None:
    run = RunEvents()
    pairer = NodePairer()
    call = run.call("c1", "calculator", {"expression": "2+2"})
    result = run.result("c1", "calculator", {"value": 4})
    assert pairer.feed(call, 0, 0) == []
    [record] = pairer.feed(result, 0, 1)

    assert record.node_type == "TOOL"
    assert record.node_id == "tool@run-1|t1|1|c1"
    assert record.inputs == {
        "callId": "c1",
        "toolName": "calculator",
        "arguments": {"expression": "2+2"},
        "type": None,
    }
    assert record.outputs == {
        "callId": "c1",
        "toolName": "calculator",
        "output": {"value": 4},
        "error": None,
        "ok": None,
        "failed": None,
        "trace": None,
    }
    assert record.started_at_epoch_ms == T0_MS
    assert record.captured_at_epoch_ms == T0_MS + 100
    assert record.duration_ms == 100
    # MODEL enrichment is empty/0 on TOOL nodes
    assert record.model_id is None
    assert record.output_text == ""
    assert record.reasoning_text == ""
    assert record.retry_count == 0
    assert (record.input_tokens, record.output_tokens) == (None, None)
    assert record.source_event_ids == (call.event_id, result.event_id)


def test_tool_error_is_kept_in_outputs() -> None:
    run = RunEvents()
    events = [run.call("c1", "fetch", {"url": "x"}), run.result("c1", "fetch", None, "HTTP 500")]
    [record] = feed_all(NodePairer(), events)
    assert record.outputs["error"] == "HTTP 500"
    assert record.outputs["output"] is None


def test_tool_key_falls_back_to_tool_name_without_call_id() -> None:
    run = RunEvents()
    events = [
        run.call(None, "search", {"q": "a"}),
        run.call(None, "fetch", {"url": "b"}),
        run.result(None, "fetch", "page"),
        run.result(None, "search", ["hit"]),
    ]
    records = feed_all(NodePairer(), events)
    assert [r.node_id for r in records] == ["tool@run-1|t1|1|fetch", "tool@run-1|t1|1|search"]
    assert [r.inputs["arguments"] for r in records] == [{"url": "b"}, {"q": "a"}]
    assert [r.outputs["output"] for r in records] == ["page", ["hit"]]


def test_tool_call_without_call_id_and_tool_name_pairs_as_anon() -> None:
    run = RunEvents()
    events = [run.call(None, None, {"x": 1}), run.result(None, None, "ok")]
    [record] = feed_all(NodePairer(), events)
    assert record.node_id == "tool@run-1|t1|1|anon"
    assert record.inputs == {"callId": None, "toolName": None, "arguments": {"x": 1}, "type": None}
    assert record.outputs["output"] == "ok"


def test_calls_under_the_same_key_pair_first_in_first_out() -> None:
    run = RunEvents()
    events = [
        run.call(None, None, {"n": 1}),
        run.call(None, None, {"n": 2}),
        run.result(None, None, "one"),
        run.result(None, None, "two"),
    ]
    records = feed_all(NodePairer(), events)
    assert [(r.inputs["arguments"]["n"], r.outputs["output"]) for r in records] == [
        (1, "one"),
        (2, "two"),
    ]
    assert records[0].record_id != records[1].record_id


def test_orphan_tool_result_is_captured_without_input() -> None:
    run = RunEvents()
    result = run.result("c9", "injected", {"value": "external"})
    [record] = NodePairer().feed(result, 0, 0)
    assert record.node_type == "TOOL"
    assert record.node_id == "tool@run-1|t1|1|c9"
    assert record.inputs is None
    assert record.outputs["output"] == {"value": "external"}
    assert record.started_at_epoch_ms == record.captured_at_epoch_ms == T0_MS
    assert record.duration_ms == 0
    assert record.source_event_ids == (result.event_id,)


def test_result_with_another_key_than_its_call_is_an_orphan_and_the_call_stays_open() -> None:
    run = RunEvents()
    pairer = NodePairer()
    records = feed_all(pairer, [run.call("c1", "calc", {}), run.result(None, "calc", 1)])
    assert [r.inputs for r in records] == [None]
    assert pairer.open_nodes() == 1


def test_step_end_flushes_the_model_node_only_and_tools_flush_on_their_own() -> None:
    run = RunEvents()
    pairer = NodePairer()
    events = [
        run.request(prompt()),
        run.response("calling a tool", {"id": "r"}),
        run.call("c1", "calc", {"e": "1+1"}),
        run.step_end(),
        run.result("c1", "calc", 2),
    ]
    records = feed_all(pairer, events)
    assert [r.node_type for r in records] == ["MODEL", "TOOL"]
    assert pairer.open_nodes() == 0


def test_step_end_without_a_model_node_produces_nothing() -> None:
    run = RunEvents()
    assert feed_all(NodePairer(), [run.step_end()]) == []


def test_model_events_without_an_open_request_are_dropped_and_counted_like_ai4j() -> None:
    """ai4j opens a node only on MODEL_REQUEST; runtrail used to open one on any model event."""
    run = RunEvents()
    pairer = NodePairer()
    events = [
        run.response("hi", {"id": 1}),
        run.reasoning("hmm"),
        run.retry(1, "busy"),
        run.step_end(),
        run.request(prompt(), step=2),
        run.response("ok", step=2),
        run.step_end(step=2),
        run.response(" late", {"id": 2}, step=2),  # after STEP_END: no extra record
        run.step_end(step=2),
    ]
    [record] = feed_all(pairer, events)
    assert (record.step, record.output_text, record.incomplete) == (2, "ok", False)
    assert pairer.dropped == {"no-open-request": 4}
    assert pairer.open_nodes() == 0 and pairer.holds() == {}


def test_keys_separate_steps_turns_runs_and_tenants() -> None:
    a = RunEvents("run-a")
    b = RunEvents("run-b")
    other_tenant = RunEvents("run-a", tenant="globex")
    events = [
        a.request(prompt(text="a1"), step=1),
        b.request(prompt(text="b1"), step=1),
        other_tenant.request(prompt(text="g1"), step=1),
        a.request(prompt(text="a2"), step=2),
        a.request(prompt(text="a-t2"), turn="t2", step=1),
        a.response("A1", step=1),
        b.response("B1", step=1),
        other_tenant.response("G1", step=1),
        a.response("A2", step=2),
        a.response("AT2", turn="t2", step=1),
        other_tenant.step_end(step=1),
        a.step_end(turn="t2", step=1),
        a.step_end(step=2),
        b.step_end(step=1),
        a.step_end(step=1),
    ]
    records = feed_all(NodePairer(), events)
    got = [
        (r.tenant_id, r.node_id, r.output_text, r.inputs["messages"][0]["content"]) for r in records
    ]
    assert got == [
        ("globex", "model@run-a|t1|1", "G1", "g1"),
        ("acme", "model@run-a|t2|1", "AT2", "a-t2"),
        ("acme", "model@run-a|t1|2", "A2", "a2"),
        ("acme", "model@run-b|t1|1", "B1", "b1"),
        ("acme", "model@run-a|t1|1", "A1", "a1"),
    ]
    assert len({r.record_id for r in records}) == 5


def test_missing_turn_and_step_render_empty_in_node_ids() -> None:
    run = RunEvents()
    events = [
        run.request(prompt(), turn=None, step=None),
        run.step_end(turn=None, step=None),
        run.call(None, "calc", turn=None, step=None),
        run.result(None, "calc", turn=None, step=None),
    ]
    assert [r.node_id for r in feed_all(NodePairer(), events)] == [
        "model@run-1||",
        "tool@run-1|||calc",
    ]


def test_redelivered_events_are_ignored_by_their_node() -> None:
    run = RunEvents()
    request = run.request(prompt())
    delta = run.response("Hel")
    last = run.response("lo", {"id": "r"})
    end = run.step_end()
    [record] = feed_all(NodePairer(), [request, delta, delta, last, last, end])
    assert record.output_text == "Hello"
    assert record.source_event_ids == (
        request.event_id,
        delta.event_id,
        last.event_id,
        end.event_id,
    )


def test_record_times_come_from_occurred_at_never_from_the_clock() -> None:
    run = RunEvents()
    pairer = NodePairer(clock=lambda: 42)
    [record] = feed_all(pairer, model_step(run))
    assert record.started_at_epoch_ms == epoch_ms(iso(T0_MS))
    assert record.captured_at_epoch_ms == T0_MS + 200


def test_session_id_is_taken_from_a_later_event_when_the_first_lacks_it() -> None:
    run = RunEvents(session=None)
    request = run.request(prompt())
    run.session = "sess-late"
    [record] = feed_all(NodePairer(), [request, run.step_end()])
    assert record.session_id == "sess-late"


def test_other_event_types_are_ignored() -> None:
    run = RunEvents()
    accepted = run.event("run.accepted", {"goalRef": "g", "policyVersion": "1"})
    pairer = NodePairer()
    assert pairer.feed(accepted, 0, 0) == []
    assert pairer.open_nodes() == 0
    assert pairer.held_offsets() == {}
