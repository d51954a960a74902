"""A run's time and shape on its page, in headless Chromium: a time on every event (a
publisher's events carry no ``recordedAt``), who acted and who approved in the row, the
waterfall of steps and nodes with their durations and a streamed answer's time to first
token, and prompts and answers as chat messages in both recorded forms (GenAI ``parts``, as
the OpenTelemetry adapter records; OpenAI ``content``/``tool_calls``, as the OpenAI
instrumentations and the demo record), the raw JSON one click away.

The stores are built directly (``tests/ui_stores.py``); the capture records come from the
same events through capture's own pairer, as the capture service would write them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runtrail.capture import JsonlFileSink, NodeIoRecord, NodePairer
from runtrail.capture.times import epoch_ms
from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.resume.builder import EntryBuilder, WriteBatch
from tests.capture_support import feed_all
from tests.projection_support import Run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, wait

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}
T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
APPROVER = {"kind": "user", "id": "oncall@acme"}

#: A GenAI-convention prompt, as the OpenTelemetry adapter records an OpenInference span
#: (tests/test_otel_openinference.py holds the adapter to exactly this form).
GENAI_PROMPT = {
    "model": "gpt-x",
    "operation": "chat",
    "provider": "openai",
    "messages": [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]},
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call-1",
                    "name": "weather",
                    "arguments": {"city": "Oslo"},
                }
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call-1", "response": "[-3]"}],
        },
    ],
}
GENAI_RAW = {
    "model": "gpt-x-0613",
    "outputMessages": [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "It is -3."}],
            "finish_reason": "stop",
        }
    ],
    "usage": {"input_tokens": 30, "output_tokens": 9},
}
#: An OpenAI chat-completions prompt (content, tool_calls with JSON-text arguments,
#: tool_call_id), as the OpenAI instrumentations and the demo's agent record it.
OPENAI_PROMPT = {
    "model": "fake-llm-1",
    "temperature": 0,
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "book a table"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "book", "arguments": '{"seats": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "booked #42"},
    ],
}
OPENAI_RAW = {
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_10",
                        "type": "function",
                        "function": {"name": "confirm", "arguments": '{"id": 42}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 5},
}


def at(ms: int) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat().replace("+00:00", "Z")


def shaped_run(run_id: str) -> Run:
    """Two steps: a streamed answer (GenAI form) and a tool call; then an OpenAI-form request
    whose first attempt fails and is retried, answered with a tool call; an approval granted through the command API (its actor, its
    recordedAt); success."""
    run = Run(run_id, TENANT)
    run.add("run.accepted", {"goalRef": "goal://1", "policyVersion": "p-1"}, occurred_at=at(0))
    run.add(
        "run.state_transitioned",
        {"fromStatus": "received", "toStatus": "executing", "reason": None},
        occurred_at=at(10),
    )
    where = {"turn_id": "t1", "step": 1}
    run.add("MODEL_REQUEST", {"prompt": GENAI_PROMPT}, occurred_at=at(1000), **where)
    for ms, text in ((1250, "It "), (1400, "is "), (1600, "-3.")):  # streamed deltas
        run.add("MODEL_RESPONSE", {"message": text, "raw": None}, occurred_at=at(ms), **where)
    run.add("MODEL_RESPONSE", {"message": None, "raw": GENAI_RAW}, occurred_at=at(1700), **where)
    call = {"callId": "c-1", "toolName": "lookup", "arguments": '{"q": "x"}', "type": None}
    run.add("TOOL_CALL", call, occurred_at=at(1800), **where)
    result = {"callId": "c-1", "toolName": "lookup", "output": "found", "error": None}
    run.add("TOOL_RESULT", {**result, "ok": True, "failed": None, "trace": None},
            occurred_at=at(2300), **where)  # fmt: skip
    run.add("STEP_END", {"reason": "tool_use"}, occurred_at=at(2310), **where)
    where = {"turn_id": "t1", "step": 2}
    run.add("MODEL_REQUEST", {"prompt": OPENAI_PROMPT}, occurred_at=at(3000), **where)
    run.add("MODEL_RESPONSE", {"message": "Sor", "raw": None}, occurred_at=at(3100), **where)
    retry = {"attempt": 1, "maxAttempts": 3, "reason": "TimeoutError: read timed out"}
    run.add("MODEL_RETRY", retry, occurred_at=at(3200), **where)  # the attempt is dropped
    run.add("MODEL_REQUEST", {"prompt": OPENAI_PROMPT}, occurred_at=at(3300), **where)
    run.add("MODEL_RESPONSE", {"message": None, "raw": OPENAI_RAW}, occurred_at=at(3900), **where)
    run.add("STEP_END", {"reason": "tool_use"}, occurred_at=at(3910), **where)
    digest = "sha256:" + "ab" * 32
    run.add("run.approval_required", {"actionDigest": digest, "reason": "deploy", "expiresAt": None},
            occurred_at=at(4000))  # fmt: skip
    run.add(
        "run.approval_granted",
        {"actionDigest": digest, "approvedBy": APPROVER["id"]},
        occurred_at=at(5000),
        recorded_at=at(5000),
        actor=APPROVER,
    )
    run.add("run.succeeded", {"resultRef": "result:1"}, occurred_at=at(6000))
    return run


@dataclass(frozen=True)
class Served:
    url: str
    run: Run
    records: list[NodeIoRecord]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-shape")
    state = root / "state"
    state.mkdir()
    run = shaped_run("shape-1")
    seed(state, [run])
    records = feed_all(NodePairer(), run.events)
    sink = JsonlFileSink(state / "capture")
    sink.write(records)
    sink.close()
    cache = open_store(RESUME_ENTRIES, sqlite_url(state / "resume-cache.db"), readers=1)
    try:  # the resume cache's entries, built from the same events by its own builder
        batch = WriteBatch()
        builder = EntryBuilder()
        for offset, event in enumerate(run.events):
            builder.feed(event, 0, batch, offset)
        cache.apply(batch, "runtrail.events")
    finally:
        cache.close()
    with serving(state, TOKENS, root / "ui.log") as url:
        yield Served(url, run, records)


def open_run(driver: Any, served: Served) -> None:
    from selenium.webdriver.common.by import By

    sign_in(driver, served.url, TOKENS[TENANT])
    driver.get(f"{served.url}/runs/{served.run.run_id}")
    wait(driver, lambda d: d.find_elements(By.ID, "waterfall"))


def test_every_event_has_a_time_and_its_actor(served: Served, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    open_run(browser, served)
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline li.event")
    assert len(rows) == len(served.run.events)
    for row, event in zip(rows, served.run.events, strict=True):
        form = event.json_form()
        shown = row.find_element(By.TAG_NAME, "time")
        occurred = datetime.fromisoformat(form["occurredAt"])
        assert shown.text == occurred.strftime("%H:%M:%S.") + f"{occurred.microsecond // 1000:03d}"
        assert shown.get_attribute("datetime") == form["occurredAt"]
        actor = row.find_element(By.CSS_SELECTOR, ".actor").text
        assert f"{form['actor']['kind']}:{form['actor']['id']}" in actor
    granted = browser.find_element(By.CSS_SELECTOR, 'li.event[data-type="run.approval_granted"]')
    assert granted.find_element(By.CSS_SELECTOR, ".actor").text == "approved by user:oncall@acme"
    assert "recorded " + at(5000) in granted.find_element(By.TAG_NAME, "time").get_attribute(
        "title"
    )
    shoot(browser, tmp_path, "times-and-actors")


def test_the_waterfall_has_each_step_and_node_with_its_duration(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    open_run(browser, served)
    bars = browser.find_elements(By.CSS_SELECTOR, "#waterfall tr.wf")
    got = [
        (
            bar.get_attribute("class").split()[1],
            bar.get_attribute("data-step"),
            int(bar.get_attribute("data-duration-ms")),
            int(bar.get_attribute("data-start-ms")),
        )
        for bar in bars
    ]
    assert {(r.node_type, r.step) for r in served.records} == {
        ("MODEL", 1), ("TOOL", 1), ("MODEL", 2)
    }  # fmt: skip
    by_id = {r.record_id: r for r in served.records}
    nodes = [b for b in bars if b.get_attribute("data-record")]
    for bar in nodes:  # each node's bar is what capture recorded
        record = by_id[bar.get_attribute("data-record")]
        assert int(bar.get_attribute("data-duration-ms")) == record.duration_ms
        assert int(bar.get_attribute("data-start-ms")) == record.started_at_epoch_ms
    assert [g[0:3] for g in got if g[0] == "wf-step"] == [
        ("wf-step", "1", 2310 - 1000),
        ("wf-step", "2", 3910 - 3000),
    ]
    assert got[0][3] == epoch_ms(at(1000))
    # the streamed answer: first token 250 ms after the request, in 4 response events
    ttft = browser.find_elements(By.CSS_SELECTOR, "#waterfall span.ttft")
    assert [t.get_attribute("data-ttft-ms") for t in ttft] == ["250"]
    assert ttft[0].text == "first token 250 ms · 4 chunks"
    assert "first token" not in " ".join(
        b.text for b in bars if b.get_attribute("data-step") == "2"
    )
    rect = bars[0].find_element(By.TAG_NAME, "rect")
    assert rect.size["width"] > 0  # drawn, without inline style
    shoot(browser, tmp_path, "waterfall")


def chat_of(element: Any) -> list[tuple[str, str, list[str], str | None]]:
    """(role, text, tool calls "name args", answered call) of each rendered message."""
    from selenium.webdriver.common.by import By

    found = []
    for msg in element.find_elements(By.CSS_SELECTOR, ".msg"):
        texts = msg.find_elements(By.CSS_SELECTOR, ".text")
        calls = [
            c.find_element(By.TAG_NAME, "b").text + " " + c.find_element(By.TAG_NAME, "pre").text
            for c in msg.find_elements(By.CSS_SELECTOR, ".tool-call")
        ]
        results = msg.find_elements(By.CSS_SELECTOR, ".tool-result")
        answered = (
            results[0].get_attribute("data-call")
            + " "
            + results[0].find_element(By.TAG_NAME, "pre").text
            if results
            else None
        )
        found.append(
            (msg.get_attribute("data-role"), texts[0].text if texts else "", calls, answered)
        )
    return found


def open_prompt(driver: Any, node: Any) -> list[tuple[str, str, list[str], str | None]]:
    from selenium.webdriver.common.by import By

    prompt = node.find_element(By.CSS_SELECTOR, "details.lazy-chat")
    prompt.find_element(By.TAG_NAME, "summary").click()
    wait(driver, lambda d: prompt.find_elements(By.CSS_SELECTOR, ".chat"))
    return chat_of(prompt.find_element(By.CSS_SELECTOR, ".chat-slot"))


def test_prompts_and_answers_read_as_chat_in_both_forms(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    open_run(browser, served)
    model1, model2 = (r for r in served.records if r.node_type == "MODEL")
    first = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{model1.record_id}"]')
    assert open_prompt(browser, first) == [
        ("system", "be brief", [], None),
        ("user", "weather in Oslo?", [], None),
        ("assistant", "", ['weather {"city":"Oslo"}'], None),
        ("tool", "", [], "call-1 [-3]"),
    ]
    assert chat_of(first.find_element(By.CSS_SELECTOR, ".output")) == [
        ("assistant", "It is -3.", [], None)
    ]
    second = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{model2.record_id}"]')
    assert open_prompt(browser, second) == [
        ("user", "book a table", [], None),
        ("assistant", "", ['book {"seats":2}'], None),
        ("tool", "", [], "call_9 booked #42"),
    ]
    assert chat_of(second.find_element(By.CSS_SELECTOR, ".output")) == [
        ("assistant", "", ['confirm {"id":42}'], None)
    ]
    shoot(browser, tmp_path, "chat")
    # the raw JSON, one click away: the prompt exactly as recorded
    raw = second.find_element(By.CSS_SELECTOR, 'details.lazy-chat details[data-part="inputs"]')
    raw.find_element(By.TAG_NAME, "summary").click()
    pre = raw.find_element(By.TAG_NAME, "pre")
    wait(browser, lambda d: pre.text not in ("", "loading…"))
    assert json.loads(pre.text) == OPENAI_PROMPT


def test_resume_entries_are_in_step_order_and_link_to_their_nodes(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    open_run(browser, served)
    rows = browser.find_elements(By.CSS_SELECTOR, "#resume tr.entry")
    got = [(r.get_attribute("data-step"), r.get_attribute("data-kind")) for r in rows]
    assert got == [("1", "model"), ("1", "tool"), ("2", "model")]
    by_id = {r.record_id: r for r in served.records}
    for row, (step, kind) in zip(rows, got, strict=True):
        link = row.find_element(By.CSS_SELECTOR, "a.entry-node")
        target = link.get_attribute("href").rsplit("#", 1)[1]
        node = browser.find_element(By.ID, target)
        record = by_id[node.get_attribute("data-record")]
        assert (str(record.step), record.node_type.lower()) == (step, kind)
    tool_link = rows[1].find_element(By.CSS_SELECTOR, "a.entry-node")
    href = tool_link.get_attribute("href")
    tool_link.click()  # to the tool's node card
    assert browser.execute_script("return window.location.hash") == "#" + href.rsplit("#", 1)[1]
    shoot(browser, tmp_path, "resume-entries")
