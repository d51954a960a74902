"""``runtrail capture query`` and ``runtrail replay node`` (mock and live) against real sinks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtrail.capture import JsonlFileSink, NodeIoRecord, NodePairer, replay_model_mock
from runtrail.persistence import CAPTURE_RECORDS, open_store
from runtrail_tools.cli.main import main
from tests import capture_replay_client
from tests.capture_support import RunEvents, feed_all, sample_records, tool_records

CLIENT = "tests.capture_replay_client:make_client"
REINVOKER = "tests.capture_replay_client:make_reinvoker"
RUNTRAIL = (sys.executable, "-m", "runtrail_tools.cli.main")


@pytest.fixture
def records() -> dict[str, NodeIoRecord]:
    model, tool = sample_records()  # run-1 of acme
    other_run = tool_records(1, run_id="run-2")[0]
    other_tenant = tool_records(1, tenant="globex")[0]  # run-1 of globex
    run = RunEvents("run-3")  # a MODEL node whose request carried no prompt
    no_prompt = feed_all(
        NodePairer(), [run.request(None), run.response("late", None), run.step_end()]
    )[0]
    return {
        "model": model,
        "tool": tool,
        "other_run": other_run,
        "other_tenant": other_tenant,
        "no_prompt": no_prompt,
    }


@pytest.fixture
def sink(tmp_path: Path, records: dict[str, NodeIoRecord]) -> str:
    url = (tmp_path / "capture").as_uri()
    writer = JsonlFileSink(tmp_path / "capture")
    writer.write(list(records.values()))
    writer.write([records["model"], records["tool"]])  # at-least-once: identical lines again
    writer.close()
    return url


@pytest.fixture(autouse=True)
def no_calls_yet() -> None:
    capture_replay_client.CALLS.clear()


def calls() -> list[tuple[str, Any]]:
    """What the replay client module was called with, in order."""
    return capture_replay_client.CALLS


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def lines(out: str) -> list[NodeIoRecord]:
    return [NodeIoRecord.from_json(line) for line in out.splitlines()]


# --- capture query ------------------------------------------------------------------------------
def test_query_prints_each_record_of_the_run_once_as_json_lines(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    status, out, _ = cli(capsys, "capture", "query", "--run", "run-1", "--sink", sink)
    assert status == 0
    printed = lines(out)
    assert sorted(r.record_id for r in printed) == sorted(
        records[k].record_id for k in ("model", "tool", "other_tenant")
    )
    assert out.splitlines()[0].startswith('{"recordId":')  # camelCase JSON form
    assert {r.record_id: r for r in printed}[records["model"].record_id] == records["model"]


def test_query_filters_by_type_and_tenant(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    _, out, _ = cli(capsys, "capture", "query", "--run", "run-1", "--type", "MODEL", "--sink", sink)
    assert lines(out) == [records["model"]]
    _, out, _ = cli(
        capsys, "capture", "query", "--run", "run-1", "--tenant", "globex", "--sink", sink
    )
    assert lines(out) == [records["other_tenant"]]


def test_query_of_an_unknown_run_exits_1(capsys: pytest.CaptureFixture[str], sink: str) -> None:
    status, out, err = cli(capsys, "capture", "query", "--run", "nope", "--sink", sink)
    assert (status, out) == (1, "")
    assert "no records of run 'nope'" in err


def test_query_defaults_to_the_capture_services_sink(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    sink: str,
    records: dict[str, NodeIoRecord],
) -> None:
    # the service's default: file://<state dir>/capture (sink was written to tmp_path/capture)
    status, out, _ = cli(capsys, "capture", "query", "--run", "run-2", "--state-dir", str(tmp_path))
    assert (status, lines(out)) == (0, [records["other_run"]])
    monkeypatch.setenv("RUNTRAIL_CAPTURE_SINK_URL", sink)
    status, out, _ = cli(capsys, "capture", "query", "--run", "run-2")
    assert (status, lines(out)) == (0, [records["other_run"]])


def test_query_reads_an_object_store_sink(
    capsys: pytest.CaptureFixture[str], s3_url: str, records: dict[str, NodeIoRecord]
) -> None:
    writer = open_store(CAPTURE_RECORDS, s3_url, compression="zstd")
    writer.write([records["model"], records["tool"]])
    writer.close()
    status, out, _ = cli(capsys, "capture", "query", "--run", "run-1", "--sink", s3_url)
    assert status == 0
    assert sorted(lines(out), key=lambda r: r.node_type) == [records["model"], records["tool"]]


def test_the_console_script_runs_query(sink: str, records: dict[str, NodeIoRecord]) -> None:
    done = subprocess.run(
        [*RUNTRAIL, "capture", "query", "--run", "run-2", "--sink", sink],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == [records["other_run"]]


# --- replay node --mock -------------------------------------------------------------------------
def test_mock_replay_prints_the_rebuilt_result_and_calls_nothing(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    model = records["model"]
    status, out, _ = cli(capsys, "replay", "node", model.record_id, "--mock", "--sink", sink)
    assert status == 0
    answer = json.loads(out)
    mock = replay_model_mock(model)
    assert answer == {
        "recordId": model.record_id,
        "nodeId": model.node_id,
        "nodeType": "MODEL",
        "mode": "mock",
        "result": {
            "raw": mock.raw,
            "outputText": "The answer is 4.",
            "reasoningText": "add the numbers",
            "inputTokens": 9,
            "outputTokens": 4,
            "source": "outputs",
        },
    }
    assert answer["result"]["raw"] == model.outputs
    assert calls() == []


def test_mock_replay_of_a_tool_node_prints_its_captured_result(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    tool = records["tool"]
    status, out, _ = cli(capsys, "replay", "node", tool.record_id, "--mock", "--sink", sink)
    assert status == 0
    assert (
        json.loads(out)["result"]
        == tool.outputs
        == {
            "callId": "c1",
            "toolName": "calculator",
            "output": {"value": 4},
            "error": None,
            "ok": None,
            "failed": None,
            "trace": None,
        }
    )


def test_replay_of_an_unknown_record_exits_1(capsys: pytest.CaptureFixture[str], sink: str) -> None:
    status, out, err = cli(capsys, "replay", "node", "no-such-id", "--mock", "--sink", sink)
    assert (status, out) == (1, "")
    assert "no record 'no-such-id'" in err


# --- replay node --live -------------------------------------------------------------------------
def test_live_replay_calls_the_client_once_with_the_captured_prompt(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    model = records["model"]
    status, out, _ = cli(
        capsys,
        "replay",
        "node",
        model.record_id,
        "--live",
        "--model-client",
        CLIENT,
        "--sink",
        sink,
    )
    assert status == 0
    assert calls() == [("model", model.inputs)]
    answer = json.loads(out)
    assert answer["mode"] == "live"
    assert answer["original"]["outputText"] == "The answer is 4."
    assert answer["live"] == {
        "model": "echo-of-glm-5.1",
        "text": "WHAT IS 2+2?",
        "usage": {"input_tokens": 12, "output_tokens": 12},
    }


def test_live_replay_in_a_child_process_calls_the_client_exactly_once(
    tmp_path: Path, sink: str, records: dict[str, NodeIoRecord]
) -> None:
    log = tmp_path / "calls.jsonl"
    model = records["model"]
    sink_flag = ("--sink", sink)
    done = subprocess.run(
        [
            *RUNTRAIL,
            "replay",
            "node",
            model.record_id,
            "--live",
            "--model-client",
            CLIENT,
            *sink_flag,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, capture_replay_client.LOG_ENV: str(log)},
    )
    assert done.returncode == 0, done.stderr
    calls = [orjson.loads(line) for line in log.read_text().splitlines()]
    assert calls == [{"kind": "model", "input": model.inputs}]
    assert json.loads(done.stdout)["live"]["text"] == "WHAT IS 2+2?"


def test_live_replay_of_a_tool_node_uses_the_reinvoker(
    capsys: pytest.CaptureFixture[str], sink: str, records: dict[str, NodeIoRecord]
) -> None:
    tool = records["tool"]
    argv = ["replay", "node", tool.record_id, "--live", "--tool-reinvoker", REINVOKER]
    status, out, _ = cli(capsys, *argv, "--sink", sink)
    assert status == 0
    assert calls() == [("tool", tool.inputs)]
    answer: dict[str, Any] = json.loads(out)
    assert answer["original"] == tool.outputs
    assert answer["live"] == {"callId": "c1", "output": "re-ran calculator", "error": None}


@pytest.mark.parametrize(
    ("which", "extra", "message"),
    [
        ("model", [], "needs --model-client MODULE:FACTORY"),
        ("model", ["--model-client", "tests.capture_replay_client"], "expects MODULE:FACTORY"),
        ("model", ["--model-client", "tests.capture_replay_client:nope"], "has no attribute"),
        ("model", ["--model-client", "no_such_module_x:make"], "No module named"),
        ("model", ["--model-client", "tests.capture_replay_client:not_a_client"], "no create"),
        ("tool", ["--model-client", CLIENT], "needs --tool-reinvoker"),
        ("no_prompt", ["--model-client", CLIENT], "has no captured prompt"),
    ],
)
def test_live_replay_refuses_clearly(
    capsys: pytest.CaptureFixture[str],
    sink: str,
    records: dict[str, NodeIoRecord],
    which: str,
    extra: list[str],
    message: str,
) -> None:
    record_id = records[which].record_id
    status, out, err = cli(capsys, "replay", "node", record_id, "--live", *extra, "--sink", sink)
    assert (status, out) == (2, "")
    assert message in err
    assert calls() == []


def test_mock_and_live_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", "node", "x", "--mock", "--live"])
    assert exit_info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
