"""The redactor's prefilter (its Aho-Corasick scans: the compiled one of ASCII bytes and the
Python ones) answers exactly as the scan-per-marker algorithm it replaced, on any text: made
of marker fragments, word ends, qualifiers, DSNs, escapes and mixed case, and on arbitrary
text. The prefilter's own soundness against the walk is held by ``tests/test_redaction.py``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.publisher import secret_markers
from runtrail.publisher.secret_keys import KEY_QUALIFIERS, SECRET_SUFFIXES
from runtrail.publisher.secret_markers import has_marker
from tests.examples import examples
from tests.secret_markers_reference import has_marker as reference

FRAGMENTS = [
    *SECRET_SUFFIXES,
    *KEY_QUALIFIERS,
    "key", "Key", "KEY", "AKIA", "akia", "ASIA", "eyJ", "eyj", "passw", "Bearer ", "basic",
    "-----BEGIN", "sk-", "xox", "\\u00", "gh", "ghp_", "github_pat_", "://", "user:pw@host",
    "http://a:b@c", "_", "-", ".", " ", "s", "S", "x", "0", '"', "İ", "ß", "\U0001f600",
]  # fmt: skip
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join) | st.text(max_size=80)


@settings(max_examples=examples(3000), deadline=None)
@given(texts)
def test_the_same_answer_as_one_scan_per_marker(text: str) -> None:
    assert has_marker(text) == reference(text)
    if not any("\ud800" <= c <= "\udfff" for c in text):  # orjson never writes these
        assert has_marker(text.encode()) == reference(text), "its UTF-8 bytes (a JSON text)"


def test_every_kind_of_marker_is_found_and_near_misses_are_not() -> None:
    found = [
        "AKIAIOSFODNN7", "x eyJhbGciOi", "db_password", "Authorization", "api_key", "api-key",
        "apiKey", "x-api-key", "aws_secret_access_key", "postgres://u:p@h/db", "ghp_abc",
        "sessionToken", "set-cookie", "\\u0070assword", "BEGIN -----begin", "xoxb-1",
    ]  # fmt: skip
    clean = [
        "inputTokens", "idempotencyKey", "cache_key", "monkey", "keyboard", "https://example.org/x",
        "author", "authority", "tokens", "secrets", "",
    ]  # fmt: skip
    for text in found:
        assert has_marker(text) and reference(text) and has_marker(text.encode()), text
    for text in clean:
        assert has_marker(text) == reference(text) == has_marker(text.encode()), text


def _compiled_scan() -> Callable[[bytes], bool | None]:
    """The compiled scan; never a skip without it: the suite runs with the extension."""
    scan = secret_markers._native_scan
    if scan is None:
        pytest.fail(
            "runtrail_native is not installed (or RUNTRAIL_NATIVE=off): "
            "`pip install ./shared/runtrail_native` builds it",
            pytrace=False,
        )
    return scan


DSN_FRAGMENTS = [
    "://", ":", "@", "/", '"', " ", "\t", "\x0b", "\x1c", "\x1f", "\x7f", "u", "p", "postgres",
    "KEY", "api_", "key", ". ", "-", "AKIA", "x",
]  # fmt: skip
ascii_texts = st.lists(st.sampled_from(FRAGMENTS + DSN_FRAGMENTS), max_size=16).map("".join) | (
    st.text(st.characters(max_codepoint=127), max_size=80)
)


@settings(max_examples=examples(3000), deadline=None)
@given(ascii_texts)
def test_the_compiled_scan_answers_as_the_python_scan(text: str) -> None:
    data = text.encode()
    native = _compiled_scan()(data)
    if not data.isascii():
        assert native is None
        return
    assert native == reference(text), "the scan-per-marker algorithm"
    kept = secret_markers._native_scan
    try:
        secret_markers._native_scan = None
        assert has_marker(data) == native, "the Python automaton over the same bytes"
    finally:
        secret_markers._native_scan = kept


def test_the_compiled_scan_finds_every_kind_of_marker_in_json_text() -> None:
    scan = _compiled_scan()
    assert scan(b'{"url":"postgres://u:p@h/db"}') is True
    assert scan(b'{"url":"https://example.org/a:b@c"}') is False  # "/" before "@"
    assert scan(b'{"k":"AKIAIOSFODNN7"}') is True and scan(b'{"k":"akiaiosfodnn7"}') is False
    assert scan(b'{"apiKey":1}') is True and scan(b'{"idempotencyKey":1}') is False
    assert scan(b'{"inputTokens":1}') is False and scan(b'{"sessionToken":1}') is True
    assert scan('{"x":"é"}'.encode()) is None  # not ASCII: the Python scan decides
