"""The publisher's fast path encodes a form that already is its JSON form as it is: the bytes
must be those of the validated event's ``json_form()``, and anything a lax validation would
convert (or refuse) must leave the fast path.

Also the envelope stamps ``publish`` makes (event IDs, timestamps), formatted by hand for speed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.workload import workload
from runtrail.events import CURRENT_VERSIONS, EventCodec, avro_schemas, native, validate_json_form
from runtrail.events.codec import _STRICT_BUILDS, validate_exact
from runtrail.events.envelope import EVENT_CLASSES, ISO_8601
from runtrail.publisher.envelope_defaults import new_event_id, utc_now_iso
from tests.examples import examples

CODEC = EventCodec()
SAMPLE = list(workload(2000))
FIXTURES = avro_schemas.schemas_dir() / "fixtures"


def _reference(form: dict[str, Any]) -> bytes:
    """The bytes of the path every form took before: lax validation, json_form(), encode."""
    return CODEC.encode_json_form(validate_json_form(form).json_form())


def _fast(form: dict[str, Any]) -> bytes | None:
    exact = validate_exact(form)
    if exact is None:
        return None
    return CODEC.encode_exact(dict(exact[1]))


def _current_fixtures() -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(FIXTURES).glob("*.json")):
        loaded = json.loads(path.read_text())
        for form in loaded if isinstance(loaded, list) else [loaded]:
            if CURRENT_VERSIONS.get(form["type"]) == form["schemaVersion"]:
                out.append(form)
    return out


@pytest.mark.parametrize("form", _current_fixtures(), ids=lambda f: f["type"])
def test_every_current_fixture_takes_the_fast_path_with_the_same_bytes(
    form: dict[str, Any],
) -> None:
    assert _fast(form) == _reference(form)


def test_workload_events_with_or_without_their_null_fields_give_the_same_bytes() -> None:
    for form in SAMPLE[:600]:
        assert _fast(form) == _reference(form)
        sparse = {k: v for k, v in form.items() if v is not None}
        sparse["data"] = {k: v for k, v in form["data"].items() if v is not None}
        assert _fast(sparse) == _reference(sparse)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
@given(arguments=JSON, output=JSON)
def test_any_json_in_json_valued_fields_gives_the_same_bytes(arguments: Any, output: Any) -> None:
    base = _of_type("TOOL_CALL")
    call = {**base, "data": {**base["data"], "arguments": arguments}}
    result = _of_type("TOOL_RESULT")
    result = {**result, "data": {**result["data"], "output": output}}
    for form in (call, result):
        assert _fast(form) == _reference(form)


def _of_type(event_type: str) -> dict[str, Any]:
    return next(f for f in SAMPLE if f["type"] == event_type)


def _tool_call() -> dict[str, Any]:
    return _of_type("TOOL_CALL")


@pytest.mark.parametrize(
    "change",
    [
        {"step": "3"},  # lax turns it into 3
        {"schemaVersion": True},  # equal to 1, but not its JSON form
        {"sequence": 7},  # an int, where the JSON form has a decimal string
        {"sequence": " 7"},
        {"runId": None},
    ],
    ids=["step-as-text", "version-as-bool", "sequence-as-int", "sequence-spaced", "no-run"],
)
def test_what_a_lax_validation_converts_or_refuses_leaves_the_fast_path(
    change: dict[str, Any],
) -> None:
    form = {**_tool_call(), **change}
    assert validate_exact(form) is None


def test_snake_case_names_and_odd_json_values_leave_the_fast_path() -> None:
    form = _tool_call()
    snake = {**form, "data": {**form["data"], "call_id": form["data"]["callId"]}}
    del snake["data"]["callId"]
    assert validate_exact(snake) is None
    run_id = {**form, "run_id": form["runId"]}
    del run_id["runId"]
    assert validate_exact(run_id) is None
    # pydantic's JSON mode writes a datetime its own way: the fast encoder must not guess
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    dated = {**form, "data": {**form["data"], "arguments": {"at": when}}}
    exact = validate_exact(dated)
    assert exact is not None
    assert CODEC.encode_exact(dict(exact[1])) is None


def test_event_ids_are_canonical_time_ordered_uuids() -> None:
    seen = set()
    for _ in range(2000):
        before = time.time_ns() // 1_000_000
        text = new_event_id()
        after = time.time_ns() // 1_000_000
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122
        assert before <= parsed.int >> 80 <= after  # RFC 9562: the Unix time in milliseconds
        seen.add(text)
    assert len(seen) == 2000
    # an ID of a later millisecond sorts after every earlier one, as text and as a UUID
    first = new_event_id()
    time.sleep(0.002)
    later = new_event_id()
    assert first < later and uuid.UUID(first) < uuid.UUID(later)
    # each of the 74 random bits (rand_a, rand_b) is 1 in some ID and 0 in another
    random_bits = (0xFFF << 64) | ((1 << 62) - 1)
    ones = zeros = 0
    for text in seen:
        bits = uuid.UUID(text).int & random_bits
        ones |= bits
        zeros |= ~bits & random_bits
    assert ones == zeros == random_bits


def test_a_forked_child_never_hands_out_the_ids_its_parent_made_ahead() -> None:
    new_event_id()  # the parent now holds IDs made ahead of use
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report 300 IDs and leave at once
        os.write(write, "\n".join(new_event_id() for _ in range(300)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        child = set(stream.read().decode().split("\n"))
    os.waitpid(pid, 0)
    parent = {new_event_id() for _ in range(300)}
    assert len(child) == 300
    assert not child & parent


def test_timestamps_are_utc_milliseconds_between_the_clock_readings_around_them() -> None:
    for _ in range(50):
        before = dt.datetime.now(dt.UTC).replace(microsecond=0)
        stamp = utc_now_iso()
        after = dt.datetime.now(dt.UTC)
        assert re.match(ISO_8601, stamp)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
        parsed = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert before <= parsed <= after


def test_the_compiled_builder_validates_as_strict_pydantic() -> None:
    """The fast path validates with the compiled builder where it can; its event must be the
    one a strict pydantic validation of the same record gives."""
    built = 0
    for form in [*_current_fixtures(), *SAMPLE[:600]]:
        exact = validate_exact({**form, "sequence": form.get("sequence") or "1"})
        assert exact is not None, form["type"]
        event, record = exact
        cls = EVENT_CLASSES[(record["type"], record["schemaVersion"])]
        assert event == cls.__pydantic_validator__.validate_python(record, strict=True)
        strict = _STRICT_BUILDS.get(cls)
        built += strict is not None and strict.build(record) is not None
    assert built > 500  # the builder, not pydantic, made most of them


def _with_text_at(form: dict[str, Any], path: tuple[tuple[str, ...], ...]) -> dict[str, Any] | None:
    """A copy of ``form`` with the decimal string "3" at ``path`` (first spellings), or None
    when a parent on the path is not an object in it."""
    copy = {**form}
    parent = copy
    for step in path[:-1]:
        child = parent.get(step[0])
        if not isinstance(child, dict):
            return None
        parent[step[0]] = parent = {**child}
    parent[path[-1][0]] = "3"
    return copy


def test_a_decimal_string_in_any_int_field_leaves_the_fast_path() -> None:
    """The builder reads "3" in an int field as 3 (as a lax validation does); the fast path
    must not take it, since the record it encodes would still hold the string."""
    tried: set[tuple[str, tuple[tuple[str, ...], ...]]] = set()
    for form in [*_current_fixtures(), *SAMPLE[:600]]:
        form = {**form, "sequence": form.get("sequence") or "1"}
        cls = EVENT_CLASSES[(form["type"], form["schemaVersion"])]
        for path in native.int_paths(native.model_plan(cls)):
            changed = _with_text_at(form, path)
            if path == (("sequence",),) or changed is None:
                continue
            tried.add((form["type"], path))
            assert validate_exact(changed) is None, (form["type"], path)
    assert len(tried) > 40 and any(len(path) > 1 for _, path in tried)
