"""The compiled consume path (``runtrail_native``) against the Python path it stands in front of.

Both native interpreters only accept: for any input, the native answer is None (the Python
path decides) or exactly the Python path's value. These tests hold them to that on every
fixture, on random records and bytes of every schema, and on forms with one field replaced by
an odd value (blank and Unicode-space strings, non-canonical decimals, bools for ints, a
timestamp with a trailing newline, extra and doubled keys…). They also check that the common
case really takes the native path, so a plan that silently defers everything fails here.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from runtrail.events import EventCodec, EventError, avro_schemas, native
from runtrail.events.avro_fast import codec_for, compile_schema
from runtrail.events.codec import HEADER_LEN, validate_json_form
from runtrail.events.envelope import EVENT_CLASSES, Actor, EventData, Timestamp
from runtrail.events.jsonform import canonical_bytes_reference
from runtrail.events.runtime_events import ToolCall, ToolResult
from runtrail.events.upcasting import upcast
from runtrail.publisher import wal
from runtrail.publisher.spool_record import SpoolRecord
from tests.examples import examples
from tests.test_avro_fast import compiled, records

if native.NATIVE is None:  # never a skip: the suite is run with the extension (make install)
    pytest.fail(
        "runtrail_native is not installed (or RUNTRAIL_NATIVE=off): "
        "`pip install ./shared/runtrail_native` builds it",
        pytrace=False,
    )

SCHEMAS = avro_schemas.retained_schemas()
FIXTURES = avro_schemas.schemas_dir() / "fixtures"
_MISSING = object()


def _fixture_forms() -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(FIXTURES).glob("*.json")):
        loaded = json.loads(path.read_text())
        out.extend(loaded if isinstance(loaded, list) else [loaded])
    return out


FORMS = _fixture_forms()
#: the codec as the consumers run it (the compiled path in front), shared by the tests
CODEC = EventCodec()


def test_the_extension_is_there_when_required() -> None:
    if os.environ.get(native.ENV) == "required":
        assert native.NATIVE is not None


def test_required_without_the_extension_names_the_way_to_build_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "runtrail_native", None)
    with pytest.raises(native.NativeUnavailable, match=r"pip install \./shared/runtrail_native"):
        native.load("required")
    assert native.load("auto") is None
    assert native.load("off") is None


def test_the_crates_source_folder_is_not_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install without Rust finds ``shared/runtrail_native`` as a namespace package
    (the folder holds no ``__init__.py``): that is no extension, and ``auto`` runs without it."""
    import types

    folder = types.ModuleType("runtrail_native")
    folder.__path__ = [str(Path(native.__file__).parents[2] / "runtrail_native")]
    folder.__file__ = None
    monkeypatch.setitem(__import__("sys").modules, "runtrail_native", folder)
    assert native.load("auto") is None
    with pytest.raises(native.NativeUnavailable, match="not built"):
        native.load("required")


def test_an_unknown_mode_names_the_variable() -> None:
    with pytest.raises(ValueError, match="RUNTRAIL_NATIVE='fast'"):
        native.load("fast")


# --- the Avro reader -------------------------------------------------------------------------
#: (reader or writer, schema fingerprint) -> its native reader or writer: planned once per test
#: process (neither holds state, and planning one costs more than a property test's checks)
_PLANNED: dict[tuple[str, bytes], Any] = {}


def _planned(kind: str, schema: Any) -> Any:
    key = (kind, schema.fingerprint)
    if key not in _PLANNED:
        plan = native.avro_reader if kind == "reader" else native.avro_writer
        made = plan(schema.parsed)
        assert made is not None, f"no native {kind} for {schema.event_type} v{schema.version}"
        _PLANNED[key] = made
    return _PLANNED[key]


def _reader(schema: Any) -> Any:
    return _planned("reader", schema)


def _python_read(schema: Any, body: bytes) -> Any:
    try:
        return compiled(schema.parsed).decode_fast(body, 0)
    except Exception as exc:
        return ("refused", type(exc).__name__)


def _encode(schema: Any, record: Any) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, schema.parsed, record, strict=True)
    return buf.getvalue()


def test_every_retained_schema_has_a_native_reader_and_writer() -> None:
    for schema in SCHEMAS:
        assert native.avro_reader(schema.parsed) is not None, schema.event_type
        assert native.avro_writer(schema.parsed) is not None, schema.event_type


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_reads_as_the_generated_decoder_reads_it(form: dict[str, Any]) -> None:
    value = CODEC.encode_json_form(form)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    body = value[HEADER_LEN:]
    assert _reader(schema).read(body, 0) == _python_read(schema, body)
    assert _reader(schema).read(value, HEADER_LEN) == compiled(schema.parsed).decode_fast(
        value, HEADER_LEN
    )


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.event_type}.v{s.version}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_records_and_their_corruptions_read_exactly(schema: Any, data: Any) -> None:
    body = _encode(schema, data.draw(records(schema.source)))
    reader = _reader(schema)
    assert reader.read(body, 0) == _python_read(schema, body)
    # a cut, a flipped byte, a byte set to a long-varint or non-canonical value: the native
    # reader may refuse what the Python decoder reads, never read what it refuses, or differently
    cut = data.draw(st.integers(0, max(len(body) - 1, 0)))
    at = data.draw(st.integers(0, max(len(body) - 1, 0)))
    byte = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, 0xC3, 0xED]))
    for odd in (body[:cut], body[:at] + bytes([byte]) + body[at + 1 :], body + b"\x00"):
        ours = reader.read(odd, 0)
        if ours is not None:
            theirs = _python_read(schema, odd)
            assert _equal_reading(ours, theirs), (ours, theirs)


def _equal_reading(ours: Any, theirs: Any) -> bool:
    """``==``, except that a NaN read by both equals (a flipped byte of a double can make one)."""
    if isinstance(ours, float) and isinstance(theirs, float) and math.isnan(ours):
        return math.isnan(theirs)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return ours.keys() == theirs.keys() and all(
            _equal_reading(value, theirs[key]) for key, value in ours.items()
        )
    if isinstance(ours, (list, tuple)) and type(ours) is type(theirs):
        return len(ours) == len(theirs) and all(map(_equal_reading, ours, theirs))
    return bool(ours == theirs)


@pytest.mark.parametrize(
    "body",
    [
        b"\xff" * 10 + b"\x01",  # a varint longer than 10 bytes
        b"\xff" * 9 + b"\x02",  # 10 bytes holding more than 64 bits
        b"\x80\x00",  # a two-byte zero: read as 0 by both
        b"\x04\xed\xa0\x80",  # a UTF-8-encoded surrogate
        b"\x04\xc3",  # a string cut inside its bytes
        b"\x01",  # a negative length
    ],
    ids=lambda b: b.hex(),
)
def test_odd_string_bytes_read_as_the_generated_decoder_reads_them(body: bytes) -> None:
    schema = next(s for s in SCHEMAS if s.event_type == "run.accepted")
    ours = _reader(schema).read(body, 0)
    theirs = _python_read(schema, body)
    assert ours is None or ours == theirs
    if body == b"\x80\x00":  # accepted by the generated code: the reader stays in step there
        string_reader = native.NATIVE.AvroReader(("record", (("s", ("string",)),)))
        assert string_reader.read(b"\x80\x00", 0) == ({"s": ""}, 2)


def test_unions_and_integers_read_as_the_generated_decoder_reads_them() -> None:
    parsed = {
        "type": "record",
        "name": "t.Small",
        "fields": [
            {"name": "i", "type": "int"},
            {"name": "b", "type": "boolean"},
            {"name": "u", "type": ["null", "long", "double"]},
        ],
    }
    from fastavro import parse_schema

    schema = parse_schema(parsed)
    reader = native.NATIVE.AvroReader(native.avro_program(schema))
    python = compile_schema(schema).decode_fast
    for body in (
        b"\x02\x01\x00",
        b"\x02\x01\x02\x80\x01",
        b"\x02\x00\x04" + b"\x00" * 7 + b"\xf0\x3f",
        b"\x02\x02\x00",  # boolean byte 2
        b"\x02\x01\x06",  # union index 3 of 3
        b"\x02\x01\x01",  # union index -1
        b"\xfe\xff\xff\xff\x1f\x01\x00",  # an int beyond 32 bits
        b"\x02\x01\x04\x00",  # a double cut short
    ):
        ours = reader.read(body, 0)
        try:
            theirs = python(body, 0)
        except Exception:
            theirs = None
        assert ours == theirs, body.hex()


def test_schemas_the_reader_does_not_read_are_left_to_python() -> None:
    from fastavro import parse_schema

    for odd in (
        {"type": "array", "items": "long"},
        {"type": "enum", "name": "t.E", "symbols": ["A"]},
        {"type": "long", "logicalType": "timestamp-millis"},
        "bytes",
        "float",
    ):
        schema = parse_schema(
            {"type": "record", "name": "t.R", "fields": [{"name": "x", "type": odd}]}
        )
        with pytest.raises(native.Unplanned):
            native.avro_program(schema)
        assert native.avro_reader(schema) is None
        assert codec_for(schema).read_native is None


# --- the Avro writer -------------------------------------------------------------------------
def _writer(schema: Any) -> Any:
    return _planned("writer", schema)


def _generated(parsed: Any, record: Any, prefix: bytes = b"") -> bytes | None:
    out = bytearray(prefix)
    try:
        compiled(parsed).encode_fast(out, record)
    except Exception:
        return None
    return bytes(out)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_is_written_as_the_generated_encoder_writes_it(form: dict[str, Any]) -> None:
    value = CODEC.encode_json_form(form)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    record, _ = _reader(schema).read(value, HEADER_LEN)
    prefix = value[:HEADER_LEN]
    assert (
        _writer(schema).write(record, prefix) == value == _generated(schema.parsed, record, prefix)
    )


def _odd_values() -> st.SearchStrategy[Any]:
    """What a caller may put in any field: plain values of every type, the edges of each Avro
    type's range, subclasses, lone surrogates, containers."""

    class Text(str):
        pass

    class Number(int):
        pass

    return st.sampled_from(
        [None, True, False, 0, -1, 63, 64, -65, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1,
         2**63, -(2**63), -(2**63) - 1, 1.5, float("nan"), float("inf"), -0.0, 2**53 + 1,
         "", "x", "é\U0001f600", "\ud800", Text("t"), Number(3), b"x", [], {}, {"a": 1}]
    )  # fmt: skip


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.event_type}.v{s.version}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_records_and_odd_values_are_written_exactly_or_left_to_python(
    schema: Any, data: Any
) -> None:
    record = data.draw(records(schema.source))
    writer = _writer(schema)
    assert writer.write(record, b"\x00") == _generated(schema.parsed, record, b"\x00")
    # any field set to an odd value, a field too many or too few: the native writer may
    # refuse what the generated encoder writes, never write what it refuses, or differently
    odd = copy.deepcopy(record)
    target = odd
    while True:
        keys = sorted(target)
        key = data.draw(st.sampled_from(keys))
        if isinstance(target[key], dict) and data.draw(st.booleans()):
            target = target[key]
            continue
        change = data.draw(st.sampled_from(["value", "extra", "missing"]))
        if change == "value":
            target[key] = data.draw(_odd_values())
        elif change == "extra":
            target["zzExtra"] = 1
        else:
            del target[key]
        break
    ours = writer.write(odd, b"")
    if ours is not None:
        assert ours == _generated(schema.parsed, odd), odd
    assert _answer(compiled(schema.parsed).encode, odd) == _python_encode(schema.parsed, odd)


def _answer(encode: Any, record: Any) -> Any:
    """The bytes an encoder wrote, or the type of what it raised."""
    try:
        return encode(record)
    except Exception as exc:
        return type(exc)


def _python_encode(parsed: Any, record: Any) -> Any:
    """The generated encoder's bytes, else fastavro's bytes or error type: what
    :meth:`FastCodec.encode` answered before the native writer."""
    generated = _generated(parsed, record)
    if generated is not None:
        return generated
    try:
        buf = io.BytesIO()
        schemaless_writer(buf, parsed, record, strict=True)
        return buf.getvalue()
    except Exception as exc:
        return type(exc)


def test_fast_codec_encode_answers_as_before_the_native_writer_on_odd_records() -> None:
    from fastavro import parse_schema

    schema = parse_schema(
        {
            "type": "record",
            "name": "t.W",
            "fields": [
                {"name": "i", "type": "int"},
                {"name": "d", "type": "double"},
                {"name": "s", "type": ["null", "string"]},
                {"name": "b", "type": "boolean"},
            ],
        }
    )
    codec = codec_for(schema)
    assert codec.write_native is not None
    for record in (
        {"i": 1, "d": 2, "s": None, "b": True},  # an int where a double goes
        {"i": 2**31, "d": 1.0, "s": "x", "b": False},  # an int beyond 32 bits
        {"i": True, "d": 1.0, "s": "x", "b": False},  # a bool where an int goes
        {"i": 1, "d": 2**80, "s": "x", "b": False},  # an int beyond 64 bits as a double
        {"i": 1, "d": 1.0, "s": "\ud800", "b": False},  # a lone surrogate
        {"i": 1, "d": 1.0, "s": "x", "b": 1},  # an int where a bool goes
        {"i": 1, "d": 1.0, "s": "x"},  # a field missing
        {"i": 1, "d": 1.0, "s": "x", "b": True, "z": 0},  # a field too many
    ):
        assert _answer(codec.encode, record) == _python_encode(schema, record), record


# --- the model builder -----------------------------------------------------------------------
#: model class -> its native builder, planned once per test process (as ``_READERS``)
_BUILDERS: dict[type[BaseModel], Any] = {}


def _builder(cls: type[BaseModel]) -> Any:
    if cls not in _BUILDERS:
        builder = native.model_builder(cls)
        assert builder is not None, f"no native builder for {cls.__name__}"
        _BUILDERS[cls] = builder
    return _BUILDERS[cls]


def _pydantic(cls: type[BaseModel], form: Any) -> BaseModel | None:
    try:
        return cls.__pydantic_validator__.validate_python(form)  # type: ignore[no-any-return]
    except ValidationError:
        return None


def _assert_same(ours: Any, theirs: Any) -> None:
    """The same class, the same fields (recursively), the same fields set, extra and private."""
    assert type(ours) is type(theirs)
    if isinstance(theirs, BaseModel):
        assert ours.__dict__.keys() == theirs.__dict__.keys()
        for name, value in theirs.__dict__.items():
            _assert_same(ours.__dict__[name], value)
        assert ours.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
        assert ours.__pydantic_extra__ == theirs.__pydantic_extra__
        assert ours.__pydantic_private__ == theirs.__pydantic_private__
        assert ours == theirs
    elif isinstance(theirs, float) and math.isnan(theirs):  # NaN equals nothing, not even NaN
        assert math.isnan(ours)
    else:
        assert ours == theirs


def _assert_sound(cls: type[BaseModel], form: Any) -> Any:
    """The native answer is None or pydantic's own; returns it."""
    ours = _builder(cls).build(copy.deepcopy(form))
    theirs = _pydantic(cls, copy.deepcopy(form))
    if ours is not None:
        assert theirs is not None, f"native accepted what pydantic refuses: {form!r:.300}"
        _assert_same(ours, theirs)
    return ours


def test_every_event_class_has_a_native_builder() -> None:
    for cls in EVENT_CLASSES.values():
        assert native.model_builder(cls) is not None, cls.__name__


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_is_built_natively_as_pydantic_builds_it(form: dict[str, Any]) -> None:
    _assert_sound(EVENT_CLASSES[(form["type"], form["schemaVersion"])], form)
    # as consumed: decoded from Avro (a float field holds a float), upcast; never deferred
    decoded = CODEC.decode(CODEC.encode_json_form(form))
    current = upcast(decoded.written)
    cls = EVENT_CLASSES[(current["type"], current["schemaVersion"])]
    assert _assert_sound(cls, current) is not None, "the fast path deferred a plain valid event"
    _assert_same(decoded.event, cls.__pydantic_validator__.validate_python(current))


#: values that sit on an edge of some check, for any field
ODD = [
    "",
    " ",
    "\t\n",
    " x",
    "x ",
    "\u00a0",
    "\u2003x",
    "\x1c",
    "\x85",
    "é",
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00.123456789+01:00",
    "2026-01-01T00:00:00Z\n",
    "2026-01-01T00:00:00.1234567890Z",
    "\u0662026-01-01T00:00:00Z",
    "1",
    "01",
    "+1",
    " 1",
    "1_0",
    "0",
    "-1",
    "9" * 18,
    "9" * 19,
    1,
    0,
    -1,
    2**63,
    True,
    False,
    1.0,
    0.5,
    -0.0,
    float("nan"),
    float("inf"),
    None,
    {},
    [],
    b"x",
    {"kind": "agent", "id": "x"},
    {"kind": "robot", "id": "x"},
    {"kind": "agent", "id": "x", "extra": 1},
    "agent",
    "TOOL_CALL",
    {"prompt": {"model": "m"}},
    {"model": "m", "items": []},
    {"nope": 1},
]


def _paths(form: dict[str, Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = [(k,) for k in form]
    for inner in ("data", "actor"):
        if isinstance(form.get(inner), dict):
            out += [(inner, k) for k in form[inner]]
    return out


def _replace(form: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(form)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is _MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_forms_with_odd_fields_are_built_only_as_pydantic_builds_them(data: Any) -> None:
    form = data.draw(st.sampled_from(FORMS))
    cls = EVENT_CLASSES[(form["type"], form["schemaVersion"])]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(form)))
        value = data.draw(st.sampled_from([*ODD, _MISSING]) | st.text(max_size=6))
        form = _replace(form, path, value)
    if data.draw(st.booleans()):  # an extra key, or a field's other spelling
        where = data.draw(st.sampled_from(["", "data", "actor"]))
        key = data.draw(
            st.sampled_from(["extra", "event_id", "tool_name", "name", "schema_version"])
        )
        target = form if not where else form.get(where)
        if isinstance(target, dict):
            target[key] = data.draw(st.sampled_from(ODD))
    _assert_sound(cls, form)


class _Stamped(BaseModel):
    at: Timestamp


_STAMP_CHARS = "0123456789-T:.Z+ \n\u0663"  # \u0663: ARABIC-INDIC DIGIT THREE (a \\d)


@settings(max_examples=examples(3000), deadline=None)
@given(
    base=st.sampled_from(
        ["2026-11-29T10:00:00Z", "2026-11-29T10:00:00.123456789+01:30", "1999-01-01T00:00:00-05:00"]
    ),
    edits=st.lists(
        st.tuples(
            st.integers(0, 40),
            st.sampled_from(["put", "insert", "delete"]),
            st.sampled_from(_STAMP_CHARS),
        ),
        max_size=3,
    ),
)
def test_timestamps_are_accepted_natively_exactly_when_the_pattern_accepts_them(
    base: str, edits: list[tuple[int, str, str]]
) -> None:
    """The compiled path checks the envelope's timestamp pattern by hand (not by regex): on
    valid stamps and near misses (digits, separators, fraction lengths, offsets, a newline
    at the end, a non-ASCII digit), it builds exactly what pydantic accepts, and defers only
    non-ASCII text."""
    text = base
    for at, how, char in edits:
        at = min(at, len(text))
        if how == "put":
            text = text[:at] + char + text[at + 1 :]
        elif how == "insert":
            text = text[:at] + char + text[at:]
        else:
            text = text[:at] + text[at + 1 :]
    ours = _assert_sound(_Stamped, {"at": text})
    if text.isascii() and _pydantic(_Stamped, {"at": text}) is not None:
        assert ours is not None, f"the native check refused {text!r}, which the pattern accepts"


def test_a_tool_result_that_contradicts_itself_is_left_to_pydantic() -> None:
    form = next(f for f in FORMS if f["type"] == "TOOL_RESULT" and f["schemaVersion"] == 2)
    cls = EVENT_CLASSES[("TOOL_RESULT", 2)]
    bad = _replace(_replace(form, ("data", "failed"), False), ("data", "ok"), False)
    assert _builder(cls).build(bad) is None
    with pytest.raises(Exception, match="failed is false"):
        validate_json_form(bad)


def test_an_ai4j_prompt_goes_through_the_before_validator_as_in_pydantic() -> None:
    form = next(f for f in FORMS if f["type"] == "MODEL_REQUEST")
    cls = EVENT_CLASSES[("MODEL_REQUEST", 1)]
    agent_prompt = _replace(form, ("data",), {"model": "gpt", "items": [{"role": "user"}]})
    ours = _assert_sound(cls, agent_prompt)
    assert ours is not None and ours.data.prompt == {"model": "gpt", "items": [{"role": "user"}]}
    assert _builder(cls).build(_replace(form, ("data",), {"nope": 1})) is None


def test_sequence_strings_are_read_natively_only_when_canonical() -> None:
    form = FORMS[0]
    cls = EVENT_CLASSES[(form["type"], form["schemaVersion"])]
    assert _builder(cls).build(_replace(form, ("sequence",), "42")).sequence == 42
    for odd in ("042", "+42", " 42", "4_2", "0", "99999999999999999999"):
        assert _builder(cls).build(_replace(form, ("sequence",), odd)) is None
        _assert_sound(cls, _replace(form, ("sequence",), odd))


def test_actor_is_built_natively() -> None:
    built = _builder(Actor).build({"kind": "agent", "id": "a"})
    _assert_same(built, Actor(kind="agent", id="a"))
    assert _builder(Actor).build({"kind": "agent", "id": "a", "kind2": 1}) is None


class _Stripped(BaseModel):
    model_config = ConfigDict(str_strip_whitespace=True)
    name: str


class _Upper(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class _Wrapped(BaseModel):
    name: str

    @field_validator("name", mode="wrap")
    @classmethod
    def _wrapped(cls, value: Any, handler: Any) -> Any:
        return handler(value)


class _WithInfo(BaseModel):
    name: str

    @field_validator("name")
    @classmethod
    def _info(cls, value: str, info: ValidationInfo) -> str:
        return value


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True)
    count: int = Field(ge=0)


class _Listed(BaseModel):
    names: list[str]


@pytest.mark.parametrize(
    "cls", [_Stripped, _Wrapped, _WithInfo, _Strict, _Listed], ids=lambda c: c.__name__
)
def test_models_the_builder_does_not_reproduce_get_no_builder(cls: type[BaseModel]) -> None:
    with pytest.raises(native.Unplanned):
        native.model_plan(cls)
    assert native.model_builder(cls) is None


def test_an_after_validator_runs_as_in_pydantic() -> None:
    built = _builder(_Upper).build({"name": "mr"})
    _assert_same(built, _Upper(name="mr"))
    assert built.name == "MR"


# --- whole events: EventCodec.decode_parts in one native call ---------------------------------
ISO = "2026-12-01T10:00:00.000Z"


PY_CODEC = EventCodec()
PY_CODEC.decode_native = None  # the Python path alone


def _python_parts(value: Any, recorded_at: str | None, depth_limit: int | None) -> Any:
    try:
        return PY_CODEC.decode_parts(value, recorded_at, depth_limit)
    except Exception as exc:
        return ("refused", type(exc).__name__, str(exc))


def _assert_parts_sound(value: Any, recorded_at: str | None, depth_limit: int | None) -> Any:
    """Both native decodes (with the written form, and the event alone) are None or the
    Python path's answer; returns the first."""
    assert CODEC.decode_native is not None and CODEC.decode_event is not None
    ours = CODEC.decode_native(value, recorded_at, depth_limit)
    alone = CODEC.decode_event(value, recorded_at, depth_limit)
    if ours is not None or alone is not None:
        theirs = _python_parts(value, recorded_at, depth_limit)
        assert theirs[0] != "refused", f"native decoded what the codec refuses: {theirs}"
        if ours is not None:
            _assert_same(ours[0], theirs[0])
            assert ours[1] == theirs[1] and list(ours[1]) == list(theirs[1])  # key order too
            assert ours[2] == theirs[2]
        if alone is not None:
            _assert_same(alone[0], theirs[0])
            assert alone[1] == theirs[2]
    return ours


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
@pytest.mark.parametrize("depth_limit", [None, 1, 2, 3, 64])
@pytest.mark.parametrize("recorded_at", [None, ISO])
def test_every_fixture_decodes_natively_as_the_codec_decodes_it(
    form: dict[str, Any], depth_limit: int | None, recorded_at: str | None
) -> None:
    value = CODEC.encode_json_form(form)
    assert _assert_parts_sound(value, recorded_at, depth_limit) is not None, "deferred"
    # the event alone, too (an old version's data lifted by the upcasters)
    alone = CODEC.decode_event(value, recorded_at, depth_limit)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    texts = [orjson.dumps(form["data"][name]).decode() for name in schema.json_fields]
    deep = depth_limit is not None and any(
        form["data"][name] is not None and t.count("{") + t.count("[") >= depth_limit
        for name, t in zip(schema.json_fields, texts, strict=True)
    )
    assert (alone is None) is deep


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.event_type}.v{s.version}")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_event_bytes_decode_natively_only_as_the_codec_does(schema: Any, data: Any) -> None:
    value = b"\xc3\x01" + schema.fingerprint + _encode(schema, data.draw(records(schema.source)))
    _assert_parts_sound(value, data.draw(st.sampled_from([None, ISO])), 2)
    at = data.draw(st.integers(0, len(value) - 1))
    byte = data.draw(st.integers(0, 255))
    _assert_parts_sound(value[:at] + bytes([byte]) + value[at + 1 :], ISO, 2)
    _assert_parts_sound(value[:at], ISO, None)


def _with_data(event_type: str, **data: Any) -> bytes:
    """A fixture of ``event_type`` written with some of its data fields replaced, through
    fastavro (so a JSON-text field can hold any text)."""
    form = next(f for f in FORMS if f["type"] == event_type)
    value = CODEC.encode_json_form(form)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    record = compiled(schema.parsed).decode_fast(value, HEADER_LEN)[0]
    record["data"].update(data)
    return value[:HEADER_LEN] + _encode(schema, record)


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('{"a": [1, 2]}', True),
        ("[[[]]]", True),  # three opens: at the limit of 3, walked
        ("[[]]", True),
        ("{", False),  # not JSON
        ("NaN", False),  # orjson refuses NaN and Infinity in text
        ('{"a": Infinity}', False),
        ("", False),
        ("\u00a0[]", False),
    ],
)
def test_json_text_fields_decode_natively_only_as_the_codec_does(text: str, accepted: bool) -> None:
    value = _with_data("MODEL_RESPONSE", raw=text)
    ours = _assert_parts_sound(value, ISO, 3)
    assert (ours is not None) is accepted
    deep = text.count("[") + text.count("{") >= 3
    if ours is not None:
        assert ("raw" in ours[2]) is deep
        # the event alone is not built when the walk needs the written form
        assert (CODEC.decode_event(value, ISO, 3) is None) is deep


def test_a_record_of_another_type_than_its_schema_is_left_to_the_codec() -> None:
    form = next(f for f in FORMS if f["type"] == "STEP_END")
    value = CODEC.encode_json_form(form)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    record = compiled(schema.parsed).decode_fast(value, HEADER_LEN)[0]
    for change in ({"type": "MODEL_RESPONSE"}, {"schemaVersion": 9}):
        odd = value[:HEADER_LEN] + _encode(schema, {**record, **change})
        assert CODEC.decode_native(odd, ISO, 2) is None
        assert _python_parts(odd, ISO, 2)[0] == "refused"


def test_an_old_version_is_upcast_natively_as_the_codec_upcasts_it() -> None:
    form = next(f for f in FORMS if f["type"] == "TOOL_CALL" and f["schemaVersion"] == 1)
    ours = _assert_parts_sound(CODEC.encode_json_form(form), ISO, 2)
    assert ours is not None and ours[0].schema_version == 2 and ours[1]["schemaVersion"] == 1
    assert ours[0].recorded_at == ISO and ours[1]["recordedAt"] is None
    alone = CODEC.decode_event(CODEC.encode_json_form(form), ISO, 2)
    assert alone is not None
    _assert_same(alone[0], ours[0])


# --- the RFC 8785 fast-path check ------------------------------------------------------------
class _Str(str):
    pass


class _Int(int):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


_keys = st.text(max_size=4) | st.sampled_from(["\ud800", "\U0001f600", "é", "", "a\udfff"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53) + 1, -(2**53), 2**64, 0.5, 1.0, -0.0, 1e-5])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5)
    | st.builds(_Str, st.text(max_size=3))
    | st.builds(_Int, st.integers(0, 9))
)
_json_like = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_keys, inner, max_size=4)
        | st.builds(_Dict, st.dictionaries(_keys, inner, max_size=2))
        | st.tuples(inner)
    ),
    max_leaves=12,
)


@settings(max_examples=examples(2000), deadline=None)
@given(value=_json_like)
def test_the_compiled_canonical_check_answers_as_the_python_one(value: Any) -> None:
    from runtrail.events.jsonform import _fast_ok

    ours = native.NATIVE.jcs_fast_ok(value)
    assert ours is None or ours == _fast_ok(value)


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_the_event_alone_is_the_decoded_event(form: dict[str, Any]) -> None:
    value = CODEC.encode_json_form(form)
    _assert_same(CODEC.decode_event_only(value, ISO), PY_CODEC.decode(value, ISO).event)
    _assert_same(PY_CODEC.decode_event_only(value, ISO), PY_CODEC.decode(value, ISO).event)


_ACTORS = [
    {"kind": "agent", "id": "test-agent"},
    {"kind": "agent", "id": "test-agent2"},
    {"kind": "agent", "id": "test-agenT"},  # the same length as the first
    {"kind": "service", "id": "test-agent"},
    {"kind": "user", "id": "u\u00e9"},
    {"kind": "operator", "id": " "},  # refused: blank
]


@settings(max_examples=examples(300), deadline=None)
@given(picks=st.lists(st.integers(0, len(_ACTORS) - 1), min_size=1, max_size=12))
def test_an_actor_is_made_once_for_the_same_bytes_and_never_for_others(picks: list[int]) -> None:
    """The compiled path hands out the actor it made last when the next event's actor bytes
    are the same (actors are frozen): every event still gets the actor its own bytes hold,
    a refused one is never kept, and the same bytes in a row give the same instance."""
    codec = EventCodec()
    previous: tuple[int, Any] | None = None
    for pick in picks:
        form = FORMS[0] | {"actor": _ACTORS[pick]}  # one type: its schema keeps one actor
        value = codec.encode_json_form(form)
        try:
            expected = PY_CODEC.decode(value, ISO).event
        except EventError:
            with pytest.raises(EventError):
                codec.decode_event_only(value, ISO)
            continue
        event = codec.decode_event_only(value, ISO)
        _assert_same(event, expected)
        if previous is not None and previous[0] == pick:
            assert event.actor is previous[1], "the same actor bytes made a second instance"
        previous = (pick, event.actor)


# --- the compiled JSON-form dumper -----------------------------------------------------------


def _pydantic_form(event: Any) -> Any:
    return event.model_dump(mode="json", by_alias=True)


#: event class -> its compiled dumper, made once per test process (as ``_READERS``)
_DUMPERS: dict[type[Any], Any] = {}


def _dumper(cls: type[Any]) -> Any:
    if cls not in _DUMPERS:
        _DUMPERS[cls] = native.json_dumper(cls)
    return _DUMPERS[cls]


def test_every_event_class_has_a_json_dumper() -> None:
    for cls in EVENT_CLASSES.values():
        assert native.json_dumper(cls) is not None, f"{cls.__name__} is dumped by pydantic"


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_dumps_as_pydantic_dumps_it(form: dict[str, Any]) -> None:
    event = PY_CODEC.decode(CODEC.encode_json_form(form), ISO).event
    dump = _dumper(type(event))
    ours = dump(event)
    assert ours == _pydantic_form(event)
    assert list(ours) == list(_pydantic_form(event))  # the same key order, too
    assert event.json_form() == ours
    # its RFC 8785 bytes, written from the plan, are the reference library's of that form
    assert dump.canonical(event) == canonical_bytes_reference(ours) == event.canonical_bytes()
    # a fresh copy: changing it changes neither the event nor the next dump
    if isinstance(ours["data"], dict):
        ours["data"]["changed"] = True
    assert dump(event) == _pydantic_form(event)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic's warnings on the odd values
@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_odd_values_set_on_an_event_dump_as_pydantic_dumps_them_or_are_left_to_it(
    data: Any,
) -> None:
    """Values no validator would let in (set behind pydantic's back) are dumped exactly, or
    the dumper defers (answers None) and ``json_form`` asks pydantic."""
    form = data.draw(st.sampled_from(FORMS))
    event = PY_CODEC.decode(CODEC.encode_json_form(form), ISO).event
    target = event if data.draw(st.booleans()) else event.data
    name = data.draw(st.sampled_from(sorted(type(target).model_fields)))
    value = data.draw(st.sampled_from(ODD) | _json_like)
    object.__setattr__(target, name, value)
    dump = _dumper(type(event))
    try:
        theirs = _pydantic_form(event)
    except Exception:  # pydantic cannot dump it either: ours must not invent a form
        assert dump(event) is None
        assert dump.canonical(event) is None
        return
    _assert_canonical_or_deferred(dump.canonical(event), theirs)
    if isinstance(event.data, EventData):  # by the payload's own dumper, or pydantic
        payload = event.data.json_form()
        assert payload == theirs["data"] and json.dumps(payload) == json.dumps(theirs["data"])
    ours = dump(event)
    if ours is None:
        assert event.json_form() == theirs
        return
    assert ours == theirs and json.dumps(ours) == json.dumps(theirs)  # 1 is not 1.0
    assert list(ours) == list(theirs)


def _assert_canonical_or_deferred(written: bytes | None, form: Any) -> None:
    """Bytes the compiled writer gives are the reference library's RFC 8785 bytes of the
    form; where the library refuses the form, the writer gave none."""
    try:
        expected = canonical_bytes_reference(form)
    except EventError:
        assert written is None
        return
    assert written is None or written == expected, (written, expected)


_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-4, 9.999999999999999e-5, 1e16, 9999999999999998.0, 0.1, 1 / 3, -2.5e-4, 123456.789]
)
#: doubles halfway between two shortest forms: RFC 8785 writes the even one (Rust's own float
#: formatting wrote the other, which hypothesis found)
_ties = st.sampled_from([70368744177664.125, 70368744177664.375, -140737488355328.375])


@settings(max_examples=examples(1500), deadline=None)
@given(value=_json_like | st.lists(_floats | _ties, max_size=6) | st.dictionaries(_keys, _floats))
def test_the_canonical_bytes_of_any_json_value_are_the_reference_librarys(value: Any) -> None:
    """A field typed ``Any`` holds whatever JSON a tool or model produced: every number,
    string and key the writer writes itself is written as the RFC 8785 library writes it."""
    form = next(f for f in FORMS if f["type"] == "TOOL_CALL" and f["schemaVersion"] == 2)
    event = PY_CODEC.decode(CODEC.encode_json_form(form), ISO).event
    object.__setattr__(event.data, "arguments", value)
    try:
        theirs = _pydantic_form(event)
    except Exception:
        assert _dumper(type(event)).canonical(event) is None
        return
    written = _dumper(type(event)).canonical(event)
    _assert_canonical_or_deferred(written, theirs)
    if isinstance(value, list) and all(type(v) is float and _written_float(v) for v in value):
        assert written is not None  # the floats it covers are written, not left to Python


def _written_float(v: float) -> bool:
    """The floats the writer writes itself (see ``json_canonical.rs``)."""
    return abs(v) < 2**53 if v.is_integer() else 1e-4 <= abs(v) < 1e16


def test_the_tool_payloads_the_node_assembly_dumps_have_a_json_dumper() -> None:
    """Capture and the resume cache keep a tool call's and result's payload as published,
    per event: a model validator (ToolResult's) does not keep its class from a dumper."""
    for cls in (ToolCall, ToolResult):
        assert native.json_dumper(cls) is not None, f"{cls.__name__} is dumped by pydantic"


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_payload_dumps_as_pydantic_dumps_it(form: dict[str, Any]) -> None:
    data = PY_CODEC.decode(CODEC.encode_json_form(form), ISO).event.data
    ours = data.json_form()
    assert ours == _pydantic_form(data)
    assert list(ours) == list(_pydantic_form(data))
    assert json.dumps(ours) == json.dumps(_pydantic_form(data))


def test_an_extension_built_before_the_dumper_leaves_every_class_to_pydantic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale ``runtrail_native`` (no ``JsonDumper``) beside this code: no dumper, no error."""

    class Stale:
        def __getattr__(self, name: str) -> Any:
            if name == "JsonDumper":
                raise AttributeError(name)
            return getattr(native.NATIVE, name)

    event = PY_CODEC.decode(CODEC.encode_json_form(FORMS[0]), ISO).event
    monkeypatch.setattr(native, "NATIVE", Stale())
    assert native.json_dumper(type(event)) is None


def test_an_extension_built_before_the_canonical_writer_canonicalises_the_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale ``JsonDumper`` (no ``canonical``): the bytes come from the form, unchanged."""
    from runtrail.events import envelope

    event = PY_CODEC.decode(CODEC.encode_json_form(FORMS[0]), ISO).event
    dump = native.json_dumper(type(event))
    assert dump is not None
    monkeypatch.setitem(envelope._DUMPERS, type(event), dump.__call__)  # has no .canonical
    assert event.canonical_bytes() == canonical_bytes_reference(event.json_form())


def test_a_subclass_or_a_missing_field_is_left_to_pydantic() -> None:
    event = PY_CODEC.decode(CODEC.encode_json_form(FORMS[0]), ISO).event
    dump = native.json_dumper(type(event))
    subclass = type("Sub", (type(event),), {})
    assert dump(subclass.model_validate(event.json_form())) is None
    del event.__dict__["correlation_id"]
    assert dump(event) is None


# --- the write-ahead log's frames ------------------------------------------------------------
_headers = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=20)), max_size=5)
_spool_records = st.builds(
    SpoolRecord,
    st.none() | st.binary(max_size=40),
    st.binary(max_size=300),
    _headers.map(tuple) | _headers,
    st.none() | st.text(max_size=40),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_spool_records, max_size=8))
def test_the_compiled_frames_are_the_python_frames(batch: list[SpoolRecord]) -> None:
    assert native.NATIVE.wal_frames(batch) == b"".join(wal.encode(r) for r in batch)
    assert wal.frames(batch) == b"".join(wal.encode(r) for r in batch)


@pytest.mark.parametrize(
    "odd",
    [
        SpoolRecord(bytearray(b"k"), b"v", ()),  # not bytes: join takes it, the native does not
        SpoolRecord(b"k", b"v", (("h", bytearray(b"x")),)),
        SpoolRecord(b"k", b"v", (), "e" * 70_000),  # an eventId too long for its field
        SpoolRecord(b"k", b"v", (), None, 2**63),  # a timestamp beyond 64 bits
        SpoolRecord(b"k", b"v", (("h", b"x", b"y"),)),  # a header of three
        SpoolRecord(b"k", b"v", (), "\ud800"),  # a lone surrogate in the eventId
        SpoolRecord(b"k", b"v", ((1, b"x"),)),  # a header name that is no text
    ],
    ids=range(7),
)
def test_odd_records_get_the_python_frames_answer(odd: SpoolRecord) -> None:
    assert native.NATIVE.wal_frames([odd]) is None
    try:
        expected: Any = wal.encode(odd)
    except Exception as exc:
        expected = type(exc)
    try:
        ours: Any = wal.frames([odd])
    except Exception as exc:
        ours = type(exc)
    assert ours == expected


def test_an_extension_built_before_the_publish_path_leaves_it_to_python() -> None:
    """A runtrail_native built from an older checkout (no AvroWriter, wal_frames or
    MarkerScanner) still imports and publishes: those steps run in Python."""
    script = """
import sys, types
import runtrail_native as real
old = types.ModuleType("runtrail_native")
old.__file__ = real.__file__
for name in dir(real):
    if name not in ("AvroWriter", "wal_frames", "MarkerScanner"):
        setattr(old, name, getattr(real, name))
sys.modules["runtrail_native"] = old
from runtrail.events import EventCodec, native
from runtrail.publisher import secret_markers, wal
from runtrail.publisher.spool_record import SpoolRecord
assert native.NATIVE is old and native.avro_reader is not None
assert wal._native_frames is None and secret_markers._native_scan is None
from bench.workload import workload
codec = EventCodec()
forms = list(workload(50))
assert [codec.decode_written(codec.encode_json_form(f)) for f in forms] == forms
assert secret_markers.has_marker(b'{"apiKey": 1}') and not secret_markers.has_marker(b"{}")
record = SpoolRecord(b"k", b"v", (("h", b"x"),), "e1", 1, 2)
assert wal.frames([record]) == wal.encode(record)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "RUNTRAIL_NATIVE": "auto"},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
