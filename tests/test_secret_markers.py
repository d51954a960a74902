"""The redactor's prefilter (two Aho-Corasick scans) answers exactly as the scan-per-marker
algorithm it replaced, on any text: made of marker fragments, word ends, qualifiers, DSNs,
escapes and mixed case, and on arbitrary text. The prefilter's own soundness against the walk
is held by ``tests/test_redaction.py``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
