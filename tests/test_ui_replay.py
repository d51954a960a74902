"""Live replay from the run page, in headless Chromium: the demo's fake "other model"
(``runtrail_tools.demo.replay_model``) answers; the diff covers the output text, the tool
calls and the token counts; the prompt and the parameters can be edited before the call, and
the edit is what the model receives. ``--model-client`` is checked when ``runtrail ui``
starts: a module that does not import, or a factory it lacks, stops it at once, named.

The run is the shape tests' (an OpenAI-form request answered with a tool call), its capture
records written by capture's own pairer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtrail.capture import JsonlFileSink, NodeIoRecord, NodePairer
from runtrail.resume import ModelResult
from runtrail_tools.cli.capture_cmd import original_result
from runtrail_tools.demo.replay_model import FACTORY, ReplayModel
from runtrail_tools.ui import replay
from tests.capture_support import feed_all
from tests.test_ui_shape import OPENAI_PROMPT, TENANT, TOKENS, shaped_run
from tests.ui_stores import NO_BROKER, seed, serving
from tests.ui_support import shoot, sign_in, ui_env, wait


@dataclass(frozen=True)
class Served:
    url: str
    run_id: str
    record: NodeIoRecord  # the OpenAI-form request, answered with a tool call


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, NodeIoRecord]:
    root = tmp_path_factory.mktemp("ui-replay") / "state"
    root.mkdir()
    run = shaped_run("replay-1")
    seed(root, [run])
    records = feed_all(NodePairer(), run.events)
    sink = JsonlFileSink(root / "capture")
    sink.write(records)
    sink.close()
    record = next(r for r in records if r.node_type == "MODEL" and r.inputs == OPENAI_PROMPT)
    return root, run.run_id, record


@pytest.fixture(scope="module")
def served(state: tuple[Path, str, NodeIoRecord]) -> Iterator[Served]:
    root, run_id, record = state
    with serving(root, TOKENS, root.parent / "ui.log", "--model-client", FACTORY) as url:
        yield Served(url, run_id, record)


def post(url: str, body: bytes = b"", content_type: str = "") -> tuple[int, bytes]:
    """A POST with the tenant's bearer token, as a script sends it."""
    sent = urllib.request.Request(url, data=body, method="POST")
    sent.add_header("Authorization", f"Bearer {TOKENS[TENANT]}")
    if content_type:
        sent.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(sent, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def rows(node: Any, part: str) -> list[tuple[str, str, str]]:
    from selenium.webdriver.common.by import By

    found = []
    for tr in node.find_elements(By.CSS_SELECTOR, f"table.diff-{part} tr")[1:]:
        left, right = (td.text for td in tr.find_elements(By.TAG_NAME, "td"))
        found.append((left, right, tr.get_attribute("class")))
    return found


def test_the_diff_covers_output_tool_calls_and_tokens(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    record = served.record
    sign_in(browser, served.url, TOKENS[TENANT])
    browser.get(f"{served.url}/runs/{served.run_id}")
    node = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{record.record_id}"]')
    node.find_element(By.CSS_SELECTOR, ".replay-live").click()
    wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, "table.diff-tokens tr"))
    fresh = ReplayModel().create(OPENAI_PROMPT)  # what the other model says to the capture
    assert fresh.raw is not None
    assert rows(node, "output") == [("", fresh.message, "d-changed")]
    args = json.dumps(fresh.raw["toolCall"]["arguments"], separators=(",", ":"))
    assert rows(node, "calls") == [('confirm({"id":42})', f"lookup({args})", "d-changed")]
    usage = fresh.raw["usage"]
    assert rows(node, "tokens") == [
        ("input 12", f"input {usage['input_tokens']}", "d-changed"),
        ("output 5", f"output {usage['output_tokens']}", "d-changed"),
    ]
    shoot(browser, tmp_path, "replay-diff")


def test_an_edited_prompt_and_parameters_are_what_the_model_gets(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    record = served.record
    sign_in(browser, served.url, TOKENS[TENANT])
    browser.get(f"{served.url}/runs/{served.run_id}")
    node = browser.find_element(By.CSS_SELECTOR, f'.node[data-record="{record.record_id}"]')
    node.find_element(By.CSS_SELECTOR, ".replay-edit summary").click()
    prompt_box = node.find_element(By.CSS_SELECTOR, ".edit-prompt")
    params_box = node.find_element(By.CSS_SELECTOR, ".edit-params")
    wait(browser, lambda d: prompt_box.get_attribute("value"))
    # the editor holds the capture: the conversation apart from the parameters
    shown_prompt = json.loads(prompt_box.get_attribute("value"))
    shown_params = json.loads(params_box.get_attribute("value"))
    assert shown_prompt == {"messages": OPENAI_PROMPT["messages"]}
    assert shown_params == {"model": "fake-llm-1", "temperature": 0}
    edited_messages = [*shown_prompt["messages"], {"role": "user", "content": "cancel it"}]
    edited = {"messages": edited_messages}
    params = {"model": "fake-llm-1", "temperature": 0.7}
    for box, value in ((prompt_box, edited), (params_box, params)):
        box.clear()
        box.send_keys(json.dumps(value))
    node.find_element(By.CSS_SELECTOR, ".replay-edited").click()
    wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, "table.diff-tokens tr"))
    fresh = ReplayModel().create({**edited, **params})
    assert fresh.raw is not None and fresh.message is not None
    assert "temperature 0.7" in fresh.message and "cancel it" in fresh.message
    assert rows(node, "output") == [("", fresh.message, "d-changed")]
    header = node.find_elements(By.CSS_SELECTOR, "table.diff-output th")[1].text
    assert header == "live (edited prompt)"
    usage = fresh.raw["usage"]
    assert rows(node, "tokens")[0] == ("input 12", f"input {usage['input_tokens']}", "d-changed")
    shoot(browser, tmp_path, "replay-edited")
    # an edit that is not JSON is refused on the page, nothing called
    prompt_box.clear()
    prompt_box.send_keys("{not json")
    node.find_element(By.CSS_SELECTOR, ".replay-edited").click()
    wait(browser, lambda d: node.find_elements(By.CSS_SELECTOR, ".replay-out p.bad"))
    assert "not JSON" in node.find_element(By.CSS_SELECTOR, ".replay-out p.bad").text


def test_an_edit_arrives_only_as_json(served: Served) -> None:
    url = f"{served.url}/runs/{served.run_id}/nodes/{served.record.record_id}/live"
    status, _ = post(url, b"prompt=x", "application/x-www-form-urlencoded")
    assert status == 415
    edit = {"prompt": ["not", "an", "object"], "parameters": {"temperature": 1}}
    status, body = post(url, json.dumps(edit).encode(), "application/json")
    assert status == 400 and "object" in json.loads(body)["error"]


def test_without_a_model_client_live_replay_is_refused(
    state: tuple[Path, str, NodeIoRecord],
) -> None:
    root, run_id, record = state
    with serving(root, TOKENS, root.parent / "ui-off.log") as url:
        status, _ = post(f"{url}/runs/{run_id}/nodes/{record.record_id}/live")
    assert status == 403


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("no_such_module_x:make", "No module named 'no_such_module_x'"),
        ("runtrail_tools.demo.replay_model:nope", "has no attribute 'nope'"),
        ("runtrail_tools.demo.replay_model", "expects MODULE:FACTORY"),
    ],
)
def test_a_wrong_model_client_stops_the_explorer_at_start(
    spec: str, said: str, tmp_path: Path
) -> None:
    argv = [sys.executable, "-m", "runtrail_tools.cli.main", "ui", "--state-dir", str(tmp_path)]
    argv += ["--port", "0", "--bootstrap-servers", NO_BROKER, "--model-client", spec]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ui_env(tmp_path))
    assert done.returncode == 2
    assert "--model-client" in done.stderr and spec in done.stderr and said in done.stderr
    assert "runtrail ui: http" not in done.stdout  # never served


def test_facets_read_every_recorded_form(state: tuple[Path, str, NodeIoRecord]) -> None:
    _, _, record = state
    captured = replay.facets(original_result(record))
    assert captured.tool_calls == ['confirm({"id":42})']
    assert (captured.input_tokens, captured.output_tokens) == (12, 5)
    demo = replay.facets(ModelResult(message="hi", raw={"usage": {"input_tokens": 3}}))
    assert (demo.text, demo.input_tokens, demo.output_tokens) == ("hi", 3, None)
    openai = replay.facets(
        {
            "choices": [{"message": {"role": "assistant", "content": "yes"}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        }
    )
    assert (openai.text, openai.tool_calls, openai.input_tokens) == ("yes", [], 7)
