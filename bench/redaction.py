"""Cost of the publisher's redactor per event: the common clean case and one with secrets.

    python -m bench.redaction [--before PATH_TO_OLD_redaction.py]

Prints µs/event (best of 7 rounds) for four typical events. With ``--before`` it also times
another version of ``redaction.py`` (e.g. ``git show REV:shared/runtrail/publisher/redaction.py``) on
the same events, interleaved, so a change can be judged on the same (possibly loaded) machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import timeit
from collections.abc import Callable
from typing import Any

from runtrail.publisher.redaction import default_redactor

Form = dict[str, Any]


def _form(data: dict[str, Any]) -> Form:
    return {
        "eventId": "0193a0b2-7c1d-7e0f-9a3b-5c6d7e8f9a0b",
        "runId": "run-42",
        "tenantId": "acme",
        "type": "MODEL_REQUEST",
        "schemaVersion": 1,
        "occurredAt": "2026-12-01T10:00:00Z",
        "actor": {"kind": "agent", "id": "planner"},
        "correlationId": "run-42",
        "causationEventId": None,
        "sessionId": "sess-1",
        "turnId": "t-1",
        "step": 3,
        "data": data,
    }


CASES: dict[str, Form] = {
    "model request, 1 KB, clean": _form(
        {
            "prompt": {
                "messages": [
                    {"role": "system", "content": "You are a helpful research assistant. " * 10},
                    {"role": "user", "content": "Summarise the quarterly report in five points."},
                ]
            },
            "model": "gpt-4o",
            "maxTokens": 1024,
            "tools": [{"name": "search", "description": "web search over the corpus"}],
        }
    ),
    "model response with usage": _form(
        {
            "message": "The board summary: revenue grew 12% in the quarter.",
            "raw": {"id": "chatcmpl-1", "usage": {"inputTokens": 512, "outputTokens": 128}},
        }
    ),
    "tool intent (idempotencyKey)": _form(
        {"invocationId": "inv-1", "toolName": "book", "idempotencyKey": "acme/run-42/inv-1"}
    ),
    "with secrets (DSN, sk-, X-API-Key)": _form(
        {
            "prompt": {"text": "use postgresql://app:hunter2@db/prod and sk-" + "a" * 40},
            "headers": {"X-API-Key": "abc123", "Accept": "json"},
        }
    ),
}


def _time(redactor: Callable[[Form], Form], form: Form, number: int) -> float:
    return min(timeit.timeit(lambda: redactor(form), number=number) for _ in range(7)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", help="another redaction.py to compare with")
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    before: Callable[[Form], Form] | None = None
    if args.before:
        spec = importlib.util.spec_from_file_location("redaction_before", args.before)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        before = module.default_redactor
    for name, form in CASES.items():
        now = _time(default_redactor, form, args.number) * 1e6
        line = f"{name:38s} {now:7.2f} us/event"
        if before is not None:
            line += f"   (before: {_time(before, form, args.number) * 1e6:7.2f} us/event)"
        print(line)


if __name__ == "__main__":
    main()
