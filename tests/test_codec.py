"""Schemas, codec, upcasters and the JSON form — no broker needed."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import orjson
import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import given
from hypothesis import strategies as st

from runtrail.events import (
    CURRENT_VERSIONS,
    DATA_MODELS,
    DuplicateKeyError,
    EventCodec,
    InvalidEvent,
    UndecodableEvent,
    UnknownEventType,
    UnknownSchema,
    canonical_bytes,
    loads_strict,
    validate_json_form,
)
from runtrail.events.avro_schemas import build_schema, generated_schemas, render, schemas_dir
from runtrail.events.schemagen import main as schemagen
from tests.support import fixture_forms, form

codec = EventCodec()


def test_committed_schemas_match_the_models() -> None:
    assert schemagen(["--check"]) == 0
    committed = {p.name for p in schemas_dir().glob("*.avsc")}
    assert committed == set(generated_schemas())


def test_every_retained_version_has_a_fixture() -> None:
    assert set(fixture_forms()) == set(DATA_MODELS)


@pytest.mark.parametrize("key", sorted(DATA_MODELS), ids=lambda k: f"{k[0]}.v{k[1]}")
def test_fixture_decodes_and_upcasts_to_current(key: tuple[str, int]) -> None:
    written = fixture_forms()[key]
    value = codec.encode_json_form(written)
    assert value[:2] == b"\xc3\x01"
    decoded = codec.decode(value)
    assert decoded.written == written  # the written form survives exactly
    assert decoded.event.schema_version == CURRENT_VERSIONS[key[0]]
    assert decoded.event.type == key[0]


def test_approval_required_v1_upcasts_with_null_expiry() -> None:
    v1 = fixture_forms()[("run.approval_required", 1)]
    decoded = codec.decode(codec.encode_json_form(v1))
    current = decoded.event.json_form()
    assert current["schemaVersion"] == 2
    assert current["data"] == {**v1["data"], "expiresAt": None}
    assert decoded.written["schemaVersion"] == 1


def test_fingerprint_is_crc64_avro_little_endian() -> None:
    schema = build_schema(DATA_MODELS[("STEP_END", 1)])
    value = codec.encode(validate_json_form(form("STEP_END", data={"reason": None})))
    expected = fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")
    assert value[2:10].hex() == expected
    # the spec's own vector: fingerprint of "null" is 0x63dd24e7cc258f8a, little-endian on the wire
    assert fingerprint(to_parsing_canonical_form("null"), "CRC-64-AVRO") == "8a8f25cce724dd63"


def test_round_trip_keeps_every_field() -> None:
    f = form(
        "TOOL_CALL",
        sequence=12,
        data={
            "callId": "c1",
            "toolName": "search",
            "arguments": {"q": "x", "n": [1, 2.5, None]},
            "type": "function",
        },
        sessionId="s1",
        causationEventId="e0",
    )
    decoded = codec.decode(codec.encode(validate_json_form(f)))
    assert decoded.event.json_form() == f
    assert decoded.event.sequence == 12


def test_recorded_at_filled_from_broker_time_but_written_form_untouched() -> None:
    value = codec.encode(validate_json_form(form()))
    decoded = codec.decode(value, recorded_at="2026-11-29T10:00:01.000Z")
    assert decoded.event.recorded_at == "2026-11-29T10:00:01.000Z"
    assert decoded.written["recordedAt"] is None


def test_garbage_is_undecodable() -> None:
    with pytest.raises(UndecodableEvent):
        codec.decode(b"not avro at all")
    with pytest.raises(UndecodableEvent):
        codec.decode(None)
    good = codec.encode(validate_json_form(form()))
    with pytest.raises(UndecodableEvent):
        codec.decode(good[:-3])  # truncated body
    with pytest.raises(UndecodableEvent):
        codec.decode(good + b"\x00\x00")  # trailing bytes


def test_unknown_fingerprint() -> None:
    good = codec.encode(validate_json_form(form()))
    with pytest.raises(UnknownSchema):
        codec.decode(good[:2] + b"\x01" * 8 + good[10:])


def test_unknown_type_from_an_extra_writer_schema(tmp_path: Path) -> None:
    schema = build_schema(DATA_MODELS[("STEP_END", 1)])
    schema["name"] = "TeleportedV1"
    schema["doc"] = "run.teleported v1"
    (tmp_path / "run.teleported.v1.avsc").write_bytes(render(schema))
    extended = EventCodec([tmp_path])
    record = {**form("run.teleported", data={"reason": None}), "sequence": 1}
    buf = io.BytesIO()
    buf.write(
        b"\xc3\x01" + bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    )
    schemaless_writer(buf, parse_schema(schema), record, strict=True)
    with pytest.raises(UnknownEventType, match="unknown type"):
        extended.decode(buf.getvalue())
    with pytest.raises(UnknownSchema):
        codec.decode(buf.getvalue())  # without the extra schema it is just unknown


def test_newer_version_than_code_is_unknown() -> None:
    f = {**fixture_forms()[("run.approval_required", 2)], "schemaVersion": 3}
    from runtrail.events import upcast

    with pytest.raises(UnknownEventType, match="newer"):
        upcast(f)


@pytest.mark.parametrize(
    ("mutation", "fragment"),
    [
        ({"sequence": "0"}, "sequence"),
        ({"actor": {"kind": "robot", "id": "x"}}, "actor.kind"),
        ({"occurredAt": "yesterday"}, "occurredAt"),
        ({"runId": "  "}, "runId"),
        ({"data": {"attempt": 0, "reason": None}, "type": "MODEL_RETRY"}, "attempt"),
    ],
)
def test_invalid_payloads_are_rejected(mutation: dict[str, object], fragment: str) -> None:
    bad = {**form(), **mutation}
    value = codec.encode_json_form(bad)  # encoding does not validate semantics
    with pytest.raises(InvalidEvent, match=fragment):
        codec.decode(value)


def test_encoding_is_strict_about_unknown_fields() -> None:
    bad = form()
    bad["data"] = {"message": "x", "raw": None, "surprise": 1}
    with pytest.raises(InvalidEvent):
        codec.encode_json_form(bad)
    with pytest.raises(InvalidEvent):
        validate_json_form(bad)


def test_json_form_rejects_duplicate_keys_and_nan() -> None:
    with pytest.raises(DuplicateKeyError):
        loads_strict('{"a": 1, "a": 2}')
    with pytest.raises(DuplicateKeyError):
        loads_strict('{"x": {"b": 1, "b": 1}}')
    with pytest.raises(InvalidEvent):
        loads_strict('{"a": NaN}')
    assert loads_strict('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}


def test_canonical_bytes_are_rfc8785() -> None:
    # RFC 8785 §3.2.2/§3.2.3: sorted keys by UTF-16 code units, ES6 number form, minimal escapes.
    value = {"b": [1.0, 1e21, -0.0, 0.000001], "a": "\u20ac\n", "\U0001f600": 1, "\u00e9": 2}
    out = canonical_bytes(value)
    assert out == '{"a":"€\\n","b":[1,1e+21,0,0.000001],"é":2,"😀":1}'.encode()
    # the RFC's own example object (Appendix / §3.2.2 sample)
    sample = json.loads(
        '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
        '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        '"literals":[null,true,false]}'
    )
    assert canonical_bytes(sample) == (
        b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(output=json_values)
def test_any_json_payload_round_trips(output: object) -> None:
    f = form("TOOL_RESULT", data={"callId": "c", "toolName": "t", "output": output, "error": None})
    f["data"].update(ok=None, failed=None, trace=None)
    decoded = codec.decode(codec.encode(validate_json_form(f)))
    assert decoded.written["data"]["output"] == output
    assert canonical_bytes(decoded.written) == canonical_bytes(orjson.loads(orjson.dumps(f)))


def test_written_form_hash_is_stable_across_upcasting() -> None:
    v1 = fixture_forms()[("run.approval_required", 1)]
    decoded = codec.decode(codec.encode_json_form(v1))
    assert (
        hashlib.sha256(canonical_bytes(decoded.written)).hexdigest()
        == hashlib.sha256(canonical_bytes(v1)).hexdigest()
    )
