"""Replay one node from the page (seed 000 §2, §7): mock replay inline, live replay only when
a model client is configured and the operator presses the button, with a side-by-side diff.

The CLI's ``replay node`` functions are used as they are (``original_result``, ``make``), so a
page and ``runtrail replay node`` can never give two answers for one record.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from runtrail.capture.record import NodeIoRecord
from runtrail.capture.replay import replay_model_live
from runtrail_tools.cli.capture_cmd import make, original_result, to_json


@dataclass(frozen=True)
class DiffRow:
    left: str
    right: str
    #: ``same``, ``changed``, ``removed`` (left only) or ``added`` (right only).
    kind: str


def text_of(result: Any) -> str:
    """The comparable text of a model result: its output text, else its JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        for name in ("outputText", "output_text", "text", "content", "message"):
            value = result.get(name)
            if isinstance(value, str):
                return value
    for name in ("output_text", "text", "content"):
        value = getattr(result, name, None)
        if isinstance(value, str):
            return value
    return to_json(result)


def side_by_side(left: str, right: str) -> list[DiffRow]:
    """Line-aligned rows of two texts (difflib opcodes), for two columns."""
    a, b = left.splitlines() or [""], right.splitlines() or [""]
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows.extend(DiffRow(x, x, "same") for x in a[i1:i2])
            continue
        lefts, rights = a[i1:i2], b[j1:j2]
        for k in range(max(len(lefts), len(rights))):
            lt = lefts[k] if k < len(lefts) else ""
            rt = rights[k] if k < len(rights) else ""
            kind = (
                "changed"
                if k < len(lefts) and k < len(rights)
                else ("removed" if k < len(lefts) else "added")
            )
            rows.append(DiffRow(lt, rt, kind))
    return rows


def mock(record: NodeIoRecord) -> dict[str, Any]:
    """The node's captured result, rebuilt without calling anything."""
    return {"recordId": record.record_id, "mode": "mock", "result": original_result(record)}


def live(record: NodeIoRecord, model_client: str) -> dict[str, Any]:
    """One real call of the configured client with the captured prompt, and the diff of its
    text against the captured output."""
    client = make(model_client, "--model-client", "a MODEL node")
    fresh = replay_model_live(record, client)
    original = original_result(record)
    left = text_of(original)
    right = text_of(fresh)
    return {
        "recordId": record.record_id,
        "mode": "live",
        "original": original,
        "live": fresh,
        "diff": [row.__dict__ for row in side_by_side(left, right)],
    }
