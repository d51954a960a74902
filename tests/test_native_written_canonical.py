"""The compiled RFC 8785 bytes of an event as written (``EventDecoder.written_canonical``, what
the audit chain hashes) against the reference: the ``rfc8785`` package's bytes of the form
``EventCodec.decode_written`` reads (Python's fastavro path, JSON-text fields parsed by
orjson). The compiled answer is either those bytes or None, never other bytes, and never bytes
where the Python path refuses the body; ``EventCodec.written_canonical`` gives the reference's
answer or its error whatever the compiled one was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtrail.events import EventError
from runtrail.events.codec import HEADER_LEN
from runtrail.events.jsonform import canonical_bytes_reference
from tests.examples import examples
from tests.test_avro_fast import compiled, records
from tests.test_native import CODEC, FORMS, SCHEMAS, _encode, _with_data

#: never a skip: importing tests.test_native fails without the extension
NATIVE = CODEC.written_canonical_native
assert NATIVE is not None, "runtrail_native was built before written_canonical: rebuild it"


def _reference(value: bytes) -> bytes | str:
    """The reference bytes of the written form, or the name of the error refusing it."""
    try:
        return canonical_bytes_reference(CODEC.decode_written(value))
    except EventError as exc:
        return type(exc).__name__


def _assert_sound(value: bytes) -> bytes | None:
    """The compiled answer is the reference's bytes or None; the codec's is the reference's."""
    ours = NATIVE(value)
    theirs = _reference(value)
    if ours is not None:
        assert ours == theirs, (value, ours, theirs)
    if isinstance(theirs, bytes):
        assert CODEC.written_canonical(value) == theirs
    else:
        with pytest.raises(EventError):
            CODEC.written_canonical(value)
    return ours


def _schema_of(value: bytes) -> Any:
    return next(s for s in SCHEMAS if s.fingerprint == value[2:HEADER_LEN])


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f['type']}.v{f['schemaVersion']}")
def test_every_fixture_is_written_by_the_compiled_path_as_the_reference_writes_it(
    form: dict[str, Any],
) -> None:
    assert _assert_sound(CODEC.encode_json_form(form)) is not None, "left to Python"


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: f"{s.event_type}.v{s.version}")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_bodies_and_their_corruptions_are_written_only_as_the_reference_writes_them(
    schema: Any, data: Any
) -> None:
    # random doubles, longs and strings everywhere; JSON-text fields mostly not JSON at all
    value = b"\xc3\x01" + schema.fingerprint + _encode(schema, data.draw(records(schema.source)))
    _assert_sound(value)
    at = data.draw(st.integers(0, len(value) - 1))
    byte = data.draw(st.integers(0, 255))
    _assert_sound(value[:at] + bytes([byte]) + value[at + 1 :])
    _assert_sound(value[:at])
    _assert_sound(value + b"\x00")


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.integers(-(2**54), 2**54)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e17, max_value=1e17, allow_nan=False)
    | st.text(max_size=6)
)
_KEYS = st.text(max_size=4) | st.sampled_from(["a", "b", "\U0001f600", "\uffff", "\ue000", "é"])
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)
#: texts no JSON encoder writes that parsers may read, or may refuse, in their own ways
_ODD_TEXTS = [
    '{"a": 1, "a": 2}',
    '{"b": 1, "a": {"d": 2, "c": [3, "x"]}}',
    "1E2",
    "1e-7",
    "-0",
    "-0.0",
    "0.1",
    "1e400",
    "-1e400",
    "1e16",
    "123456789.123456789",
    "9007199254740991",
    "9007199254740992",
    "123456789012345678901234567890",
    '"\\ud83d\\ude00"',
    '"\\ud800"',
    '"\\u0000\\u001f\\/"',
    '{"\\ud83d\\ude00": 1, "\\uffff": 2}',
    " [1 , 2 ] ",
    "[1,]",
    "\ufeff[]",
    "[" * 200 + "]" * 200,
    "tru",
    "null",
    "NaN",
]


@pytest.mark.parametrize("text", _ODD_TEXTS)
def test_odd_json_texts_are_written_only_as_the_reference_writes_them(text: str) -> None:
    for event_type, field in (("MODEL_RESPONSE", "raw"), ("TOOL_CALL", "arguments")):
        _assert_sound(_with_data(event_type, **{field: text}))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_JSON, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_random_json_in_a_json_text_field_is_written_as_the_reference_writes_it(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    ours = _assert_sound(_with_data("MODEL_RESPONSE", raw=text))
    plain = not _has_odd(value)
    if plain:  # the common case is the compiled path's, not only allowed to it
        assert ours is not None, text


def _has_odd(value: Any) -> bool:
    """Whether the compiled path may leave ``value`` to Python: a number outside its exact
    ranges, a key beyond the Basic Multilingual Plane, nesting serde_json will not read."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return False
    if isinstance(value, int):
        return abs(value) >= 2**53
    if isinstance(value, float):
        if value.is_integer():
            return abs(value) >= 2**53
        return not 1e-4 <= abs(value) < 1e16
    if isinstance(value, list):
        return any(_has_odd(v) for v in value)
    return any(any(ord(c) > 0xFFFF for c in k) or _has_odd(v) for k, v in value.items())


def test_a_body_whose_record_names_another_type_or_version_is_left_to_python() -> None:
    value = CODEC.encode_json_form(next(f for f in FORMS if f["type"] == "MODEL_RESPONSE"))
    schema = _schema_of(value)
    record = compiled(schema.parsed).decode_fast(value, HEADER_LEN)[0]
    for changed in ({"type": "TOOL_CALL"}, {"schemaVersion": schema.version + 1}):
        odd = value[:HEADER_LEN] + _encode(schema, {**record, **changed})
        assert NATIVE(odd) is None
        assert _reference(odd) == "InvalidEvent"
        with pytest.raises(EventError, match="but its schema is"):
            CODEC.written_canonical(odd)
