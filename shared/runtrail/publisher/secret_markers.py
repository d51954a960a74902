"""The redactor's prefilter: could this text hold anything the redactor would mask?

Why: nearly every event holds no secret, and walking it costs more than scanning its JSON text
once. The scan must never say "no" where the walk would change something (a hypothesis test and
a fuzz check hold it to that).
"""

from __future__ import annotations

import re

import ahocorasick_rs

from runtrail.events.native import NATIVE
from runtrail.publisher.secret_keys import KEY_QUALIFIERS, SECRET_SUFFIXES

# One cheap scan first: a string (or an event's JSON text) without any marker is returned as
# it is. Plain substring tests (``in``, ``find``) over the lower-cased text: a regex alternation
# of the same markers is several times slower in ``re``. Sound: every sensitive key name holds
# "passw"/"passphrase", or ends its last word (no letter follows) in a SECRET_SUFFIXES entry or
# in "key" after a KEY_QUALIFIERS word; every text pattern contains a marker here; ``\u`` is
# there because JSON text inside a string may spell a key name in escapes.
_CASED_MARKERS = ("AKIA", "ASIA", "eyJ")
_PLAIN_MARKERS = ("passw", "passphrase", "bearer", "basic", "-----begin", "sk-", "xox", "\\u")
_GITHUB_MARKERS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
# Each secret suffix under the first stem it contains: a stem absent from the text rules out
# every suffix under it with one scan.
_STEMS = ("pwd", "secret", "token", "cookie", "auth", "credential", "key")
_SUFFIXES_BY_STEM: dict[str, tuple[str, ...]] = {
    stem: tuple(
        x
        for x in SECRET_SUFFIXES
        if stem in x and not any(s in x for s in _STEMS[: _STEMS.index(stem)])
    )
    for stem in _STEMS
}
# "key" is everywhere (idempotencyKey, cache_key): it is a marker only after a qualifier.
_QUALIFIER_ENDINGS = tuple(sorted(KEY_QUALIFIERS))
_DSN_MARKER = re.compile(r"://[^\s/@\"]*:[^\s/@\"]*@")


#: Every lower-case marker in one automaton: a match's pattern index says what it is.
_WORD_SUFFIXES = tuple(dict.fromkeys(x for stem in _STEMS for x in _SUFFIXES_BY_STEM[stem]))
#: The cased markers come first, lower-cased: a match is one only where the text itself has
#: the marker's case at the same place (same places: the text is ASCII, see :func:`has_marker`).
_PATTERNS = (
    *(m.lower() for m in _CASED_MARKERS),
    *_PLAIN_MARKERS,
    *_GITHUB_MARKERS,
    "://",
    "key",
    *_WORD_SUFFIXES,
)
_CASED_COUNT = len(_CASED_MARKERS)
_FIRST_SUFFIX = len(_PATTERNS) - len(_WORD_SUFFIXES)
_DSN_AT, _KEY_AT = _FIRST_SUFFIX - 2, _FIRST_SUFFIX - 1
_LOWER = ahocorasick_rs.AhoCorasick(list(_PATTERNS))
#: The same automaton over bytes: an event's JSON text is scanned as orjson wrote it, with no
#: decode, and held to a ``bytearray`` so the scan keeps the GIL (a release on every event
#: lets the publisher's own threads in mid-call).
_LOWER_BYTES = ahocorasick_rs.BytesAhoCorasick([p.encode() for p in _PATTERNS])
#: The compiled scan of ASCII bytes (``runtrail_native.MarkerScanner``): the same markers and
#: checks, matched without lower-casing and copying the text; None where it is not installed
#: (or was built before it).
_MarkerScanner = getattr(NATIVE, "MarkerScanner", None)
_native_scan = (
    None
    if _MarkerScanner is None
    else _MarkerScanner(
        list(_PATTERNS),
        list(_CASED_MARKERS),
        _FIRST_SUFFIX,
        _DSN_AT,
        _KEY_AT,
        list(_QUALIFIER_ENDINGS),
    ).has_marker
)


def _ends_word(low: str, end: int) -> bool:
    return end == len(low) or not "a" <= low[end] <= "z"


def _qualified_key_at(low: str, at: int) -> bool:
    """Whether the ``key`` at ``at`` ends a word and follows a qualifier (``api_key``)."""
    if not _ends_word(low, at + 3):
        return False
    before = at
    while before > 0 and low[before - 1] in "-_. ":
        before -= 1
    return low.endswith(_QUALIFIER_ENDINGS, 0, before)


def has_marker(text: str | bytes) -> bool:
    """Whether ``text`` could hold anything :func:`redact_text` or a key check would mask.

    One Aho-Corasick scan of the lower-cased text for every marker, every occurrence, then a
    case, word or qualifier check per match where the marker needs one: a clean event's text
    costs one pass in Rust instead of some thirty ``in`` scans (the publisher's largest cost
    after validation). A non-ASCII text may change length when lower-cased, so its cased
    markers are looked for in the text itself. UTF-8 bytes (an event's orjson text) give the
    answer their text gives: ASCII bytes are scanned as they are (ASCII lower-casing is the
    same on both), any other bytes as their text; ASCII bytes go to the compiled scan when it
    is installed. The same answer as one scan per marker: ``tests/test_secret_markers.py``
    holds it (and the compiled scan) to that algorithm."""
    if isinstance(text, bytes):
        if _native_scan is not None:
            answer: bool | None = _native_scan(text)
            if answer is not None:
                return answer
        if not text.isascii():
            return has_marker(text.decode())
        found = _LOWER_BYTES.find_matches_as_indexes(bytearray(text.lower()), overlapping=True)
        return bool(found) and _any_marker(text.decode(), True, found)
    ascii_text = text.isascii()
    if not ascii_text and any(marker in text for marker in _CASED_MARKERS):
        return True
    found = _LOWER.find_matches_as_indexes(text.lower(), overlapping=True)
    return bool(found) and _any_marker(text, ascii_text, found)


def _any_marker(text: str, ascii_text: bool, found: list[tuple[int, int, int]]) -> bool:
    """Whether any automaton match in ``text`` is a marker (the checks per kind of match)."""
    low = text.lower()
    dsn_checked = False
    for index, start, end in found:
        if index < _CASED_COUNT:
            if ascii_text and text.startswith(_CASED_MARKERS[index], start):
                return True
        elif index >= _FIRST_SUFFIX:
            if _ends_word(low, end):
                return True
        elif index == _KEY_AT:
            if _qualified_key_at(low, start):
                return True
        elif index == _DSN_AT:
            if not dsn_checked:
                dsn_checked = True
                if _DSN_MARKER.search(low) is not None:
                    return True
        else:  # a plain or GitHub marker
            return True
    return False
