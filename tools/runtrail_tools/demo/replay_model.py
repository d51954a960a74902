"""The demo's "other model" for live replay in the run explorer: a deterministic fake, like the
demo's own model (``fakes.FakeModel``), so replay works with no network and no key.

It answers any prompt from the prompt alone (it has no script): a short text naming the
step and the sampling parameters, a tool call built from the last user-visible message, and
token counts of the same shape as the demo model's. Editing the prompt or the parameters
changes each of the three, so the explorer's diff has something to show on every side.
``runtrail dev up`` starts the explorer with ``--model-client`` pointing here.
"""

from __future__ import annotations

from typing import Any

from runtrail.resume import ModelResult

MODEL_ID = "fake-llm-2"
#: What ``runtrail ui --model-client`` takes to reach :func:`make_client`.
FACTORY = "runtrail_tools.demo.replay_model:make_client"


def _last_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, str) and content:
            return content
    return ""


class ReplayModel:
    """Answers a prompt (``{"messages": [...], **parameters}``) without calling anything."""

    def create(self, prompt: Any) -> ModelResult:
        body = prompt if isinstance(prompt, dict) else {"messages": prompt}
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        step = len(messages) // 2 + 1
        temperature = body.get("temperature", 0)
        last = _last_text(messages)
        text = f"{MODEL_ID} at temperature {temperature}: step {step}, answering {last[:40]!r}."
        usage = {"input_tokens": 40 + len(str(prompt)) // 8, "output_tokens": len(text) // 4}
        call = {"id": f"replay-{step}", "name": "lookup", "arguments": {"query": last[:40]}}
        return ModelResult(message=text, raw={"model": MODEL_ID, "toolCall": call, "usage": usage})


def make_client() -> ReplayModel:
    return ReplayModel()
