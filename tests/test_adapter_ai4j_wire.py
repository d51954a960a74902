"""The ai4j adapter's wire format is runtrail's, byte for byte (issue 13 item 4).

The Java encoder (``adapters/ai4j``, Avro's own single-object encoder with the schemas the jar
ships) and the Python codec encode the same JSON-form events; the bytes must be equal, so
every consumer decodes what the adapter writes. The events are the conformance sequences and
the run ai4j's real runtime emits, validated by runtrail first, plus the committed fixtures;
also the run-lifecycle events the adapter adds (run.accepted … run.succeeded / run.failed) to
a normal and a failing ai4j run (``Driver events``).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from runtrail.events import CURRENT_VERSIONS, validate_json_form
from runtrail.events.codec import EventCodec
from runtrail.events.runtime_events import RUNTIME_TYPES
from tests import ai4j_sequences as seqs
from tests.ai4j_adapter import adapter
from tests.support import fixture_forms
from tests.test_ai4j_conformance import emitted_run, runtrail_forms

CODEC = EventCodec()
LIFECYCLE = ("run.accepted", "run.state_transitioned", "run.succeeded", "run.failed")


def current_forms() -> list[dict[str, Any]]:
    """Validated current JSON forms of every runtime type, from many sequences."""
    sequences = {**seqs.basic(), **seqs.edge_cases(), "runtime": emitted_run()}
    forms = [f for events in sequences.values() for f in runtrail_forms(events)]
    fixtures = fixture_forms()
    forms += [fixtures[(t, CURRENT_VERSIONS[t])] for t in (*RUNTIME_TYPES, *LIFECYCLE)]
    runs = (("events", "wire-ok"), ("events", "wire-fails", "fail"), ("events", "w", "fail-sync"))
    for run in runs:  # the Java mapper's
        forms += adapter().run(*run)["runtrail"]
    return [validate_json_form(f).json_form() for f in forms]


def test_java_bytes_equal_python_bytes() -> None:
    forms = current_forms()
    assert {f["type"] for f in forms} == {*RUNTIME_TYPES, *LIFECYCLE}
    java = adapter().run("encode", stdin=forms)
    errors = [(f["type"], j) for f, j in zip(forms, java, strict=True) if isinstance(j, dict)]
    assert errors == []
    for form, hex_bytes in zip(forms, java, strict=True):
        ours = CODEC.encode_json_form(form)
        assert bytes.fromhex(hex_bytes) == ours, form["type"]
        assert CODEC.decode(bytes.fromhex(hex_bytes)).event.json_form() == form


def test_every_runtime_type_is_at_pythons_current_version() -> None:
    """A newer Python version of a type would make the Java side refuse it by name."""
    fixtures = fixture_forms()
    types = (*RUNTIME_TYPES, *LIFECYCLE)
    forms = [validate_json_form(fixtures[(t, CURRENT_VERSIONS[t])]).json_form() for t in types]
    older = [
        validate_json_form(fixtures[(t, v)]).json_form()
        for (t, v) in fixtures
        if t in types and v < CURRENT_VERSIONS[t]
    ]
    java = adapter().run("encode", stdin=forms + older)
    assert all(isinstance(j, str) for j in java[: len(forms)])
    assert [j for j in java[len(forms) :]] == [
        {"error": f"no schema for event type '{f['type']}' v{f['schemaVersion']}"} for f in older
    ]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f: f["data"].update(extra=1), "data.extra: not a field of"),
        (lambda f: f.pop("runId"), "runId: a string is required, not null"),
        (lambda f: f.update(sequence="x1"), "sequence: not a decimal integer"),
        (lambda f: f.update(step="3"), "step: an integer is required"),
        (lambda f: f["data"].update(ok="yes"), "data.ok: a boolean is required"),
    ],
)
def test_a_form_that_does_not_fit_is_refused_with_the_field(change: Any, reason: str) -> None:
    form = orjson.loads(orjson.dumps(fixture_forms()[("TOOL_RESULT", 2)]))
    change(form)
    (java,) = adapter().run("encode", stdin=[form])
    assert isinstance(java, dict) and reason in java["error"], java
