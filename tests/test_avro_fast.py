"""The generated Avro codec is byte-identical with fastavro, the reference, on every schema.

The generated functions are called directly (``decode_fast``/``encode_fast``), not through
:class:`FastCodec`'s fallback, so a test cannot pass by fastavro doing the work.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtrail.events import EventCodec, avro_schemas
from runtrail.events.avro_fast import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    Bad,
    FastCodec,
    Unsupported,
    codec_for,
    compile_schema,
)
from runtrail.events.codec import HEADER_LEN
from tests.examples import examples

FIXTURES = avro_schemas.schemas_dir() / "fixtures"
SCHEMAS = avro_schemas.retained_schemas()
CODEC = EventCodec()

#: Everything the real schemas do not use: enums, maps, bytes, fixed, float, unions of several
#: branches (records competing by field count, float before double, int before long), a
#: recursive record and a named-type reference.
SYNTHETIC = parse_schema(
    {
        "type": "record",
        "name": "t.Everything",
        "fields": [
            {"name": "flag", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "raw", "type": "bytes"},
            {"name": "s", "type": "string"},
            {"name": "nothing", "type": "null"},
            {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["R", "G"]}},
            {"name": "again", "type": "t.Colour"},
            {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
            {"name": "tags", "type": {"type": "map", "values": ["null", "long", "string"]}},
            {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
            {"name": "num", "type": ["float", "int", "double", "string"]},
            {"name": "wide", "type": ["int", "long", "null"]},
            {
                "name": "shape",
                "type": [
                    "null",
                    {"type": "record", "name": "Dot", "fields": [{"name": "x", "type": "long"}]},
                    {
                        "type": "record",
                        "name": "Box",
                        "fields": [
                            {"name": "x", "type": "long"},
                            {"name": "w", "type": ["null", "long"], "default": None},
                        ],
                    },
                    "Colour",
                    {"type": "map", "values": "long"},
                ],
            },
            {
                "name": "chain",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Link",
                        "fields": [
                            {"name": "v", "type": "string"},
                            {"name": "next", "type": ["null", "Link"]},
                        ],
                    },
                ],
            },
        ],
    }
)


def _reference_bytes(parsed: Any, record: Any) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parsed, record, strict=True)
    return buf.getvalue()


def _reference_record(parsed: Any, body: bytes) -> Any:
    return schemaless_reader(io.BytesIO(body), parsed, None)


#: id of a parsed schema -> (the schema, kept alive; its generated codec)
_COMPILED: dict[int, tuple[Any, FastCodec]] = {}


def compiled(parsed: Any) -> FastCodec:
    """The generated codec of a parsed schema, generated once per test process.

    A codec holds no state, and generating one (source, ``compile``) costs a hundred times
    more than the record a property test checks with it; compiling itself is held by
    :func:`test_every_retained_schema_compiles` and the fixture test."""
    kept = _COMPILED.get(id(parsed))
    if kept is None or kept[0] is not parsed:
        kept = _COMPILED[id(parsed)] = (parsed, compile_schema(parsed))
    return kept[1]


def _fast_bytes(codec: FastCodec, record: Any) -> bytes:
    out = bytearray()
    codec.encode_fast(out, record)
    return bytes(out)


def _assert_exact(codec: FastCodec, parsed: Any, record: Any) -> None:
    expected = _reference_bytes(parsed, record)
    assert _fast_bytes(codec, record) == expected
    decoded, end = codec.decode_fast(expected, 0)
    assert end == len(expected)
    assert decoded == _reference_record(parsed, expected)


# --- every fixture ------------------------------------------------------------------------------
def _fixture_forms() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(Path(FIXTURES).glob("*.json")):
        loaded = json.loads(path.read_text())
        for form in loaded if isinstance(loaded, list) else [loaded]:
            out.append((path.name, form))
    return out


@pytest.mark.parametrize(("name", "form"), _fixture_forms(), ids=lambda v: str(v)[:40])
def test_every_fixture_encodes_and_decodes_as_fastavro_does(name: str, form: Any) -> None:
    value = CODEC.encode_json_form(form)
    schema = next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])
    codec = compile_schema(schema.parsed)
    record = _reference_record(schema.parsed, value[HEADER_LEN:])
    _assert_exact(codec, schema.parsed, record)


def test_every_retained_schema_compiles() -> None:
    assert len(SCHEMAS) >= 30
    for schema in SCHEMAS:
        compile_schema(schema.parsed)


# --- random records valid for a schema ----------------------------------------------------------
#: id of a schema -> (the schema, kept alive; its strategy)
_RECORDS: dict[int, tuple[Any, st.SearchStrategy[Any]]] = {}


def records(parsed: Any) -> st.SearchStrategy[Any]:
    """Hypothesis values valid for a fastavro-parsed schema.

    Built once per schema: the tests draw it inside each example, and a strategy is an
    immutable description, so the same one draws the same values at a fraction of the cost."""
    kept = _RECORDS.get(id(parsed))
    if kept is None or kept[0] is not parsed:
        kept = _RECORDS[id(parsed)] = (parsed, _records(parsed))
    return kept[1]


def _records(parsed: Any) -> st.SearchStrategy[Any]:
    named: dict[str, Any] = {}
    deferred: dict[str, st.SearchStrategy[Any]] = {}

    def of(s: Any) -> st.SearchStrategy[Any]:
        if isinstance(s, list):
            return st.one_of([of(b) for b in s])
        if isinstance(s, str):
            prim = _primitive(s)
            if prim is not None:
                return prim
            return deferred.setdefault(s, st.deferred(lambda: of(named[s])))
        kind = s["type"]
        prim = _primitive(kind)
        if prim is not None:
            return prim
        if kind in ("record", "enum", "fixed"):
            named[s["name"]] = s
        if kind == "enum":
            return st.sampled_from(s["symbols"])
        if kind == "fixed":
            return st.binary(min_size=s["size"], max_size=s["size"])
        if kind == "array":
            return st.lists(of(s["items"]), max_size=4)
        if kind == "map":
            return st.dictionaries(st.text(max_size=6), of(s["values"]), max_size=4)
        return st.fixed_dictionaries({f["name"]: of(f["type"]) for f in s["fields"]})

    return of(parsed)


_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(INT_MIN, INT_MAX),
    "long": st.integers(LONG_MIN, LONG_MAX),
    "float": st.floats(width=32, allow_nan=False) | st.integers(-(2**24), 2**24),
    "double": st.floats(allow_nan=False) | st.integers(LONG_MIN, LONG_MAX),
    "bytes": st.binary(max_size=80),
    "string": st.text(max_size=80),
}


def _primitive(kind: str) -> st.SearchStrategy[Any] | None:
    return _PRIMITIVES.get(kind)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.event_type}.v{s.version}")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_records_of_every_schema_are_exact(schema: Any, data: st.DataObject) -> None:
    record = data.draw(records(schema.source))
    _assert_exact(compiled(schema.parsed), schema.parsed, record)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records(SYNTHETIC))
def test_random_records_of_every_avro_type_are_exact(record: Any) -> None:
    _assert_exact(compiled(SYNTHETIC), SYNTHETIC, record)


def _everything(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "flag": True,
        "i": 0,
        "l": 0,
        "f": 0.5,
        "d": 0.25,
        "raw": b"\x00\xff",
        "s": "h\u00e9llo \U0001f600",
        "nothing": None,
        "colour": "G",
        "again": "R",
        "digest": b"abcd",
        "tags": {"a": None, "b": 1, "c": "x"},
        "grid": [[1, 2], [], [3]],
        "num": 1.5,
        "wide": 7,
        "shape": {"x": 1, "w": None},
        "chain": {"v": "a", "next": {"v": "b", "next": None}},
    }
    base.update(changes)
    return base


@pytest.mark.parametrize(
    "changes",
    [
        {"l": LONG_MAX},
        {"l": LONG_MIN},
        {"i": INT_MAX, "l": INT_MAX + 1},
        {"i": INT_MIN, "l": INT_MIN - 1},
        {"l": 63},
        {"l": 64},
        {"l": -64},
        {"l": -65},
        {"wide": INT_MAX + 1},  # int does not fit: long
        {"num": 3},  # an int goes to float's neighbour double, as fastavro prefers
        {"num": 2.5},
        {"num": "x"},
        {"shape": {"x": 1}},  # Dot: both records fit, Dot has all its fields
        {"shape": "R"},
        {"shape": {"q": 1}},  # the map
        {"d": 3, "f": 2},  # ints in float fields
        {"d": math.inf, "f": -math.inf},
        {"s": "", "raw": b""},
        {"s": "x" * 200, "raw": b"y" * 200},
        {"tags": {}, "grid": []},
    ],
    ids=repr,
)
def test_edges_are_exact(changes: dict[str, Any]) -> None:
    _assert_exact(compile_schema(SYNTHETIC), SYNTHETIC, _everything(**changes))


def test_nan_is_written_as_fastavro_writes_it() -> None:
    record = _everything(d=math.nan, f=math.nan)
    assert _fast_bytes(compile_schema(SYNTHETIC), record) == _reference_bytes(SYNTHETIC, record)


# --- odd input: the generated code refuses, FastCodec gives fastavro's answer -------------------
def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "value", call()
    except Exception as exc:
        return "error", type(exc).__name__


@pytest.mark.parametrize(
    "record",
    [
        _everything(flag=1),  # an int where a bool goes
        _everything(l=True),  # a bool where a long goes
        _everything(d=True),
        _everything(l=1.0),
        _everything(s=b"bytes"),
        _everything(extra=1),
        {k: v for k, v in _everything().items() if k != "s"},
        _everything(shape=("t.Dot", {"x": 1})),  # fastavro's tuple notation
        _everything(grid=((1,),)),
        _everything(colour="B"),
        _everything(digest=b"abc"),
        _everything(l=LONG_MAX + 1),
        _everything(i=INT_MAX + 1),
        _everything(s="\ud800"),
    ],
    ids=lambda r: "",
)
def test_odd_records_get_fastavros_answer(record: Any) -> None:
    codec = compile_schema(SYNTHETIC)
    with pytest.raises((Bad, ValueError)):  # the generated code did not take it on
        codec.encode_fast(bytearray(), record)
    assert _outcome(lambda: codec.encode(record, b"P")) == _outcome(
        lambda: b"P" + _reference_bytes(SYNTHETIC, record)
    )


def _corruptions() -> list[bytes]:
    good = _reference_bytes(SYNTHETIC, _everything())
    out = [good[:n] for n in (0, 1, 5, len(good) // 2, len(good) - 1)]
    out.append(b"\x02" + good[1:])  # boolean byte 1 is fine, 2 is not canonical
    out.append(good[:1] + b"\x80\x00" + good[2:])  # a two-byte zero
    out.append(good[:1] + b"\xff" * 11 + b"\x01")  # an over-long varint
    return out


@pytest.mark.parametrize("body", _corruptions(), ids=lambda b: b[:6].hex())
def test_odd_bytes_get_fastavros_answer(body: bytes) -> None:
    codec = compile_schema(SYNTHETIC)
    ours = _outcome(lambda: codec.decode(body, 0))
    theirs = _outcome(lambda: _with_end(body))
    assert ours == theirs


def _with_end(body: bytes) -> tuple[Any, int]:
    buf = io.BytesIO(body)
    return schemaless_reader(buf, SYNTHETIC, None), buf.tell()


def test_logical_types_are_left_to_fastavro() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "t.When",
            "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        }
    )
    with pytest.raises(Unsupported):
        compile_schema(schema)


def test_an_unsupported_schema_is_served_by_fastavro_alone() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "t.When",
            "fields": [{"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}],
        }
    )
    codec = codec_for(schema)
    record = {"at": 1_700_000_000_000}
    body = codec.encode(record)
    assert body == _reference_bytes(schema, record)
    assert codec.decode(body) == (_reference_record(schema, body), len(body))
