"""Redaction of secrets from an event's JSON form before it leaves the agent's process.

Why here: the history is append-only (the audit store forbids DELETE), so a secret that reaches
Kafka can never be purged from the topic, capture files, audit chain, sessions or caches. The
publisher runs :func:`default_redactor` over every event's JSON form before validation and
encoding. What it masks (``docs/SECURITY.md`` has the full list and the reasons):

* values under secret-bearing key names, anywhere in ``data`` (:func:`is_sensitive_key`);
* secret-shaped text inside any string: provider keys and tokens, JWTs, PEM private keys,
  ``Bearer``/``Basic`` credentials, DSN passwords, ``key=value`` / ``"key": "value"`` pairs of a
  secret key name, and JSON text inside strings (parsed and walked like ``data``);
* the envelope's free-text fields (``correlationId``, ``actor.id``) the same way. Identifier
  fields (run, tenant, event, session, turn, causation ids) are keys consumers group and pair
  on: masking them would merge unrelated runs, so an identifier holding a secret-shaped value
  is refused (:class:`SecretInIdentifier`) instead.

Cost: one regex scan of the event's JSON text decides whether anything could match; a clean
event (the common case) is returned as it is, without a walk.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from typing import Any

import orjson

#: A redactor maps a JSON-form event to a (new) JSON-form event; it must not mutate its input.
Redactor = Callable[[dict[str, Any]], dict[str, Any]]

REDACTED = "[REDACTED]"


class SecretInIdentifier(ValueError):
    """An envelope identifier holds a secret-shaped value; the event is refused, not masked."""


# --- key names --------------------------------------------------------------------------------
#: A key's last word (after splitting camelCase and ``-_.`` and space) ending in one of these
#: marks its value secret: ``db_password``, ``githubToken``, ``Set-Cookie``, ``x-api-key``…
SECRET_SUFFIXES: tuple[str, ...] = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "cookie",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "apikey",
    "privatekey",
    "secretkey",
    "accesskey",
)
#: Words that make a following ``key`` secret (``api_key``, ``private_key``,
#: ``aws_secret_access_key``) while ``idempotency_key``, ``cache_key`` or ``key`` stay data.
KEY_QUALIFIERS: frozenset[str] = frozenset(
    {
        "access",
        "account",
        "api",
        "auth",
        "client",
        "encryption",
        "hmac",
        "license",
        "master",
        "private",
        "secret",
        "session",
        "signing",
        "ssh",
        "subscription",
    }
)
#: A word anywhere in the key (``password_confirmation``, ``passphrase_hint``).
SECRET_ANYWHERE: frozenset[str] = frozenset({"password", "passwd", "passphrase"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Only separators JSON never escapes, so a marker scan of JSON text sees what the split sees.
_SEPARATORS = re.compile(r"[-_. ]+")


def _secret_words(words: list[str]) -> bool:
    if not words:
        return False
    last = words[-1]
    if last.endswith(SECRET_SUFFIXES):
        return True
    if last == "key" and len(words) > 1 and words[-2] in KEY_QUALIFIERS:
        return True
    return any(w in SECRET_ANYWHERE for w in words)


@functools.lru_cache(maxsize=4096)
def is_sensitive_key(key: str) -> bool:
    """Whether values under ``key`` are secrets (any case, camelCase, ``-``/``_``/``.``).

    Split both at camelCase humps and not (``PassWord`` is a password, ``dbPassword`` too);
    ``input_tokens``, ``tokenizer``, ``secretary``, ``idempotencyKey`` are data.
    """
    plain = [w for w in _SEPARATORS.split(key.lower()) if w]
    camel = [w for w in _SEPARATORS.split(_CAMEL.sub("_", key).lower()) if w]
    return _secret_words(plain) or _secret_words(camel)


# --- secret-shaped text -----------------------------------------------------------------------
_PEM = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.DOTALL
)
_BEARER = re.compile(r"\b(Bearer)\s+[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_BASIC = re.compile(r"\b(Basic)\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE)
# OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys; the length floor spares "sk-learn".
_SK_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}")
# AWS access key IDs: AKIA (long-term) or ASIA (temporary) + 16 upper-case alphanumerics.
_AWS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")
# GitHub tokens: classic (ghp_ personal, gho_ OAuth, ghu_/ghs_ app, ghr_ refresh) and fine-grained.
_GITHUB = re.compile(
    r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"
)
# Slack tokens: xoxb- (bot), xoxp- (user), xoxa-/xoxo-/xoxr-/xoxs-.
_SLACK = re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}")
# JWTs (and JWS/JWE compact forms): base64url header and claims, both JSON objects ("eyJ").
_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# scheme://user:password@host — the password only; user and host stay for diagnosis.
_DSN = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@?#\"']*:)([^\s@/?#\"']+)@")
# <sep> value after a candidate name (found by _mask_pairs), the name then checked with
# is_sensitive_key. The value is a JSON string (plain or escaped one level or more), a quoted
# word, or a bare token.
_SEP_VALUE = re.compile(
    r"(?P<sep>\\*[\"']?\s*[:=]\s*)"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|(?P<esc>\\+)\"(?:(?!\\+\").)*\\+\"|'[^']*'"
    r"|[^\s,;&\"'<>{}\[\]\\]+)"
)
#: Every sensitive key name contains one of these (lower-cased): where pairs are looked for.
_NAME_STEMS = (
    "passw",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "cookie",
    "auth",
    "credential",
    "key",
)
# ``Cookie: …`` / ``Authorization: …`` header lines: the value runs to the end of the line (or
# a quote); an Authorization scheme word (Bearer, Basic, Digest…) is kept.
_HEADER_LINE = re.compile(
    r"(?im)(?<![\w-])(?P<name>(?:set-)?cookie|(?:proxy-)?authorization)(?P<sep>\s*:[ \t]*)"
    r"(?P<value>[^\r\n\"']*)"
)
_LINE_VALUED = frozenset({"cookie", "set-cookie", "authorization", "proxy-authorization"})
_SCHEME = re.compile(r"[A-Za-z][\w-]*[ \t]+(?=\S)")

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


def _has_marker(text: str) -> bool:
    """Whether ``text`` could hold anything :func:`redact_text` or a key check would mask."""
    for marker in _CASED_MARKERS:
        if marker in text:
            return True
    low = text.lower()
    for marker in _PLAIN_MARKERS:
        if marker in low:
            return True
    if "gh" in low and any(m in low for m in _GITHUB_MARKERS):
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


def _basic(match: re.Match[str]) -> str:
    """Mask a Basic credential only when it decodes to ``user:password`` ("Basic plan" stays)."""
    try:
        decoded = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return match.group(0)
    return f"{match.group(1)} {REDACTED}" if b":" in decoded else match.group(0)


def _masked_value(name: str, match: re.Match[str]) -> str | None:
    """What replaces the value of one ``name <sep> value`` pair, or None to keep it."""
    sep, value = match.group("sep"), match.group("value")
    if not is_sensitive_key(name) or REDACTED in value:
        return None
    if value.startswith('"'):
        return f'"{REDACTED}"'
    if match.group("esc"):
        quote = match.group("esc") + '"'
        return f"{quote}{REDACTED}{quote}"
    if value.startswith("'"):
        return f"'{REDACTED}'"
    if ":" in sep and name.lower() in _LINE_VALUED:
        return None  # a header line: _HEADER_LINE masked its whole value already
    if value[-1] in ":=":
        return None  # "token: password: x" — a label, not a value: the next pair is masked
    return REDACTED


def _is_name_char(char: str) -> bool:
    return char.isalnum() or char in "_.-"


def _candidate_names(text: str, low: str) -> list[tuple[int, int]]:
    """(start, end) of each whole name run (letters, digits, ``_.-``) holding a stem.

    Found with ``str.find`` from the stems, not with a regex tried at every position: a
    regex of names and separators costs about 0.2 s per MB of text.
    """
    spans: set[tuple[int, int]] = set()
    for stem in _NAME_STEMS:
        at = low.find(stem)
        while at >= 0:
            start, end = at, at + len(stem)
            while start > 0 and _is_name_char(text[start - 1]):
                start -= 1
            while end < len(text) and _is_name_char(text[end]):
                end += 1
            if text[start].isalpha() or text[start] == "_":
                spans.add((start, end))
            at = low.find(stem, end)
    return sorted(spans)


def _mask_pairs(text: str, low: str) -> str:
    out: list[str] = []
    pos = 0
    for start, end in _candidate_names(text, low):
        if start < pos:
            continue  # inside a value masked already
        match = _SEP_VALUE.match(text, end)
        if match is None:
            continue
        masked = _masked_value(text[start:end], match)
        if masked is None:
            continue
        out.append(text[pos : match.start("value")])
        out.append(masked)
        pos = match.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _header_line(match: re.Match[str]) -> str:
    value = match.group("value")
    if not value.strip() or REDACTED in value:
        return match.group(0)
    head = match.group("name") + match.group("sep")
    scheme = _SCHEME.match(value) if match.group("name").lower().endswith("authorization") else None
    return f"{head}{scheme.group(0) if scheme else ''}{REDACTED}"


def _json_text(text: str) -> str | None:
    """``text`` redacted as JSON when it is a JSON object or array, else None."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    redacted = redact_value(parsed)
    return text if redacted == parsed else orjson.dumps(redacted).decode()


_TOKEN_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (("sk-",), _SK_KEY),
    (("AKIA", "ASIA"), _AWS_KEY_ID),
    (("gh", "github_pat_"), _GITHUB),
    (("xox",), _SLACK),
    (("eyJ",), _JWT),
)


def redact_text(text: str) -> str:
    """``text`` with every secret shape listed in the module docstring masked."""
    if not _has_marker(text):
        return text
    as_json = _json_text(text)
    if as_json is not None:
        return as_json
    # Each pattern runs only where its literal marker is (a regex that starts with a
    # lookbehind is tried at every position: ~50 ms per MB). The masks hold no marker, so
    # gating on the text as it came in is safe.
    low = text.lower()
    if "-----BEGIN" in text:
        text = _PEM.sub(REDACTED, text)
    if "cookie" in low or "authorization" in low:
        text = _HEADER_LINE.sub(_header_line, text)
    if "bearer" in low:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if "basic" in low:
        text = _BASIC.sub(_basic, text)
    if "://" in text:
        text = _DSN.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if any(stem in low for stem in _NAME_STEMS):
        text = _mask_pairs(text, text.lower())
    for marker, pattern in _TOKEN_PATTERNS:
        if any(m in text for m in marker):
            text = pattern.sub(REDACTED, text)
    return text


def redact_value(value: Any) -> Any:
    """A redacted copy of a JSON value; unchanged sub-trees are shared, never mutated."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and is_sensitive_key(k) else redact_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


#: Envelope fields consumers key on: never masked; a secret-shaped value refuses the event.
IDENTIFIER_FIELDS: tuple[str, ...] = (
    "eventId",
    "runId",
    "tenantId",
    "causationEventId",
    "sessionId",
    "turnId",
)
#: Envelope free text (no consumer keys on it): masked like strings in ``data``.
FREE_TEXT_FIELDS: tuple[str, ...] = ("correlationId",)


def _may_hold_secrets(form: dict[str, Any]) -> bool:
    """One scan of the event's JSON text: False only when the walk would change nothing.

    Sound because every marker is plain ASCII that JSON never escapes, so a string or key
    that the walk would redact shows it verbatim in the text.
    """
    try:
        text = orjson.dumps(form).decode()
    except TypeError:  # not plain JSON (e.g. a model object): let the walk decide
        return True
    return _has_marker(text)


def _redact_envelope(form: dict[str, Any]) -> dict[str, Any]:
    for name in IDENTIFIER_FIELDS:
        value = form.get(name)
        if isinstance(value, str) and redact_text(value) != value:
            raise SecretInIdentifier(
                f"envelope field {name} holds a secret-shaped value; identifiers are never "
                "masked (consumers key on them), so the event is refused"
            )
    out = form
    for name in FREE_TEXT_FIELDS:
        value = form.get(name)
        if isinstance(value, str) and (masked := redact_text(value)) != value:
            out = {**out, name: masked}
    actor = form.get("actor")
    if isinstance(actor, dict) and isinstance(actor.get("id"), str):
        masked = redact_text(actor["id"])
        if masked != actor["id"]:
            out = {**out, "actor": {**actor, "id": masked}}
    return out


def default_redactor(form: dict[str, Any]) -> dict[str, Any]:
    """Redact secrets in ``data`` and the envelope's free text; refuse secret identifiers."""
    if not _may_hold_secrets(form):
        return form
    out = _redact_envelope(form)
    if "data" in out:
        out = {**out, "data": redact_value(out["data"])}
    return out


def no_redaction(form: dict[str, Any]) -> dict[str, Any]:
    """A redactor that changes nothing (for trusted, already-clean producers)."""
    return form
