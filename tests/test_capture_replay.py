"""Node replay (seed 000 §2): mock rebuilds, live re-invokes once; records read back replay too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtrail.capture import (
    JsonlFileSink,
    NodeIoRecord,
    NodePairer,
    NotAPromptError,
    ReplayError,
    read_records,
    replay_model_live,
    replay_model_mock,
    replay_tool_live,
)
from runtrail.events.runtime_events import ToolCall
from runtrail.persistence import CAPTURE_RECORDS, open_store
from tests.capture_support import RunEvents, feed_all, prompt, sample_records


class FakeModelClient:
    """Stands for the user's model client: records every prompt it is given."""

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def create(self, prompt: Any) -> dict[str, str]:
        self.prompts.append(prompt)
        return {"text": f"fresh answer #{len(self.prompts)}"}


def _model_record(**changes: Any) -> NodeIoRecord:
    model, _ = sample_records()
    return model.model_copy(update=changes)


def test_mock_replay_equals_the_original_output() -> None:
    model, _ = sample_records()
    result = replay_model_mock(model)
    assert result.raw == model.outputs
    assert result.output_text == model.output_text == "The answer is 4."
    assert result.reasoning_text == model.reasoning_text
    assert (result.input_tokens, result.output_tokens) == (9, 4)
    assert result.source == "outputs"
    assert replay_model_mock(model) == result  # deterministic


def test_mock_replay_cannot_alter_the_record() -> None:
    model, _ = sample_records()
    result = replay_model_mock(model)
    result.raw["id"] = "tampered"
    assert model.outputs["id"] == "resp-1"


def test_mock_replay_falls_back_to_output_text_without_a_raw_payload() -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("only "), run.response("text"), run.step_end()]
    [record] = feed_all(NodePairer(), events)
    result = replay_model_mock(record)
    assert (result.raw, result.output_text, result.source) == (None, "only text", "outputText")


def test_a_string_payload_stands_in_for_missing_text() -> None:
    result = replay_model_mock(_model_record(outputs="raw text answer", output_text=""))
    assert result.output_text == "raw text answer"
    assert result.source == "outputs"


def test_live_replay_calls_the_client_once_with_the_captured_prompt() -> None:
    model, _ = sample_records()
    client = FakeModelClient()
    fresh = replay_model_live(model, client)
    assert client.prompts == [prompt()]
    assert client.prompts[0] == model.inputs
    assert fresh == {"text": "fresh answer #1"}


def test_live_replay_refuses_a_record_without_a_prompt() -> None:
    client = FakeModelClient()
    with pytest.raises(NotAPromptError, match="no captured prompt"):
        replay_model_live(_model_record(inputs=None), client)
    assert client.prompts == []


def test_model_replay_of_a_tool_record_is_a_value_error() -> None:
    _, tool = sample_records()
    client = FakeModelClient()
    with pytest.raises(ValueError, match="TOOL node, not a MODEL node"):
        replay_model_live(tool, client)
    with pytest.raises(ReplayError):
        replay_model_mock(tool)
    assert client.prompts == []


def test_tool_live_replay_hands_the_captured_call_to_the_reinvoker() -> None:
    model, tool = sample_records()
    calls: list[ToolCall] = []

    def reinvoke(call: ToolCall) -> dict[str, Any]:
        calls.append(call)
        return {"value": 4, "fresh": True}

    assert replay_tool_live(tool, reinvoke) == {"value": 4, "fresh": True}
    assert [(c.call_id, c.tool_name, c.arguments) for c in calls] == [
        ("c1", "calculator", {"expression": "2+2"})
    ]
    with pytest.raises(ValueError, match="MODEL node, not a TOOL node"):
        replay_tool_live(model, reinvoke)
    assert len(calls) == 1


def test_tool_live_replay_refuses_an_orphan_result() -> None:
    [orphan] = NodePairer().feed(RunEvents().result("c1", "calc", 1), 0, 0)
    with pytest.raises(ReplayError, match="without a TOOL_CALL"):
        replay_tool_live(orphan, lambda call: None)


def _replay_everything(records: list[NodeIoRecord], originals: list[NodeIoRecord]) -> None:
    by_id = {r.record_id: r for r in records}
    for original in originals:
        back = by_id[original.record_id]
        assert back == original
        if back.node_type == "MODEL":
            assert replay_model_mock(back) == replay_model_mock(original)
            client = FakeModelClient()
            replay_model_live(back, client)
            assert client.prompts == [original.inputs]
        else:
            seen: list[ToolCall] = []
            replay_tool_live(back, seen.append)
            assert seen[0].model_dump(by_alias=True) == original.inputs


def test_records_read_back_from_jsonl_replay_mock_and_live(tmp_path: Path) -> None:
    originals = sample_records()
    sink = JsonlFileSink(tmp_path)
    sink.write(originals)
    sink.close()
    _replay_everything(read_records(f"file://{tmp_path}"), originals)


def test_records_read_back_from_object_storage_replay_mock_and_live(s3_url: str) -> None:
    originals = sample_records()
    sink = open_store(CAPTURE_RECORDS, s3_url + "&compression=zstd")
    sink.write(originals)
    sink.close()
    _replay_everything(read_records(s3_url), originals)
