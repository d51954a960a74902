"""The redactor's prefilter: could this text hold anything the redactor would mask?

Why: nearly every event holds no secret, and walking it costs more than scanning its JSON text
once. The scan must never say "no" where the walk would change something (a hypothesis test and
a fuzz check hold it to that).
"""

from __future__ import annotations

import re

import ahocorasick_rs

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
_PATTERNS = (*_PLAIN_MARKERS, *_GITHUB_MARKERS, "://", "key", *_WORD_SUFFIXES)
_FIRST_SUFFIX = len(_PATTERNS) - len(_WORD_SUFFIXES)
_DSN_AT, _KEY_AT = _FIRST_SUFFIX - 2, _FIRST_SUFFIX - 1
_LOWER = ahocorasick_rs.AhoCorasick(list(_PATTERNS))
_CASED = ahocorasick_rs.AhoCorasick(list(_CASED_MARKERS))


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


def has_marker(text: str) -> bool:
    """Whether ``text`` could hold anything :func:`redact_text` or a key check would mask.

    Two Aho-Corasick scans (one over the text for the cased markers, one over its lower-case
    form for all the others, every occurrence), then a word or qualifier check per match of
    a suffix or ``key``: a clean event's text costs two passes in Rust instead of some thirty
    ``in`` scans (the publisher's largest cost after validation). The same answer as one scan
    per marker: ``tests/test_secret_markers.py`` holds it to that algorithm."""
    if _CASED.find_matches_as_indexes(text):
        return True
    low = text.lower()
    dsn_checked = False
    for index, start, end in _LOWER.find_matches_as_indexes(low, overlapping=True):
        if index >= _FIRST_SUFFIX:
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
