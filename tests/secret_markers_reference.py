"""The redactor's prefilter as it was written first, one ``in`` scan per marker: the oracle
``tests/test_secret_markers.py`` holds the Aho-Corasick version of
:mod:`runtrail.publisher.secret_markers` to (the same answer on every text).

One fix against the first version: it looked for the GitHub markers only in a text holding
"gh", but ``github_pat_`` does not hold "gh", so a fine-grained token in a text without "gh"
elsewhere was never masked (``test_redaction.py`` now has that case).

Originally: could this text hold anything the redactor would mask?

Why: nearly every event holds no secret, and walking it costs more than scanning its JSON text
once. The scan must never say "no" where the walk would change something (a hypothesis test and
a fuzz check hold it to that).
"""

from __future__ import annotations

import re

from runtrail.publisher.secret_keys import KEY_QUALIFIERS, SECRET_SUFFIXES

# One cheap scan first: a string (or an event's JSON text) without any marker is returned as
# it is. Plain substring tests (``in``, ``find``) over the lower-cased text: a regex alternation
# of the same markers is several times slower in ``re``. Sound: every sensitive key name holds
# "passw"/"passphrase", or ends its last word (no letter follows) in a SECRET_SUFFIXES entry or
# in "key" after a KEY_QUALIFIERS word; every text pattern contains a marker here; ``\u`` is
# there because JSON text inside a string may spell a key name in escapes.
_CASED_MARKERS = ("AKIA", "ASIA", "eyJ")
_PLAIN_MARKERS = ("passw", "passphrase", "bearer", "basic", "-----begin", "sk-", "xox", "\\u")
_GITHUB_MARKERS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")  # all hold "gh"
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


def _ends_word_somewhere(low: str, word: str) -> bool:
    at = low.find(word)
    while at >= 0:
        end = at + len(word)
        if end == len(low) or not "a" <= low[end] <= "z":
            return True
        at = low.find(word, end)
    return False


def _qualified_key_somewhere(low: str) -> bool:
    at = low.find("key")
    while at >= 0:
        end = at + 3
        if end == len(low) or not "a" <= low[end] <= "z":
            before = at
            while before > 0 and low[before - 1] in "-_. ":
                before -= 1
            if low.endswith(_QUALIFIER_ENDINGS, 0, before):
                return True
        at = low.find("key", end)
    return False


def has_marker(text: str) -> bool:
    """Whether ``text`` could hold anything :func:`redact_text` or a key check would mask."""
    for marker in _CASED_MARKERS:
        if marker in text:
            return True
    low = text.lower()
    for marker in _PLAIN_MARKERS:
        if marker in low:
            return True
    if any(m in low for m in _GITHUB_MARKERS):  # (first written behind a "gh" gate: a bug)
        return True
    if "://" in low and _DSN_MARKER.search(low) is not None:
        return True
    for stem in _STEMS:
        if stem in low:
            for suffix in _SUFFIXES_BY_STEM[stem]:
                if _ends_word_somewhere(low, suffix):
                    return True
            if stem == "key" and _qualified_key_somewhere(low):
                return True
    return False
