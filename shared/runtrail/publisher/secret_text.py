"""Secret-shaped text inside strings: provider tokens, keys, credentials, ``key=value`` pairs.

Why: secrets reach events inside prompts and tool I/O as text (a curl command, a DSN, a header
dump, a config file), where no key name marks them. Each pattern masks only the secret part,
so the text around it stays readable.
"""

from __future__ import annotations

import base64
import binascii
import re

from runtrail.publisher.secret_keys import is_sensitive_key

REDACTED = "[REDACTED]"

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


_TOKEN_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (("sk-",), _SK_KEY),
    (("AKIA", "ASIA"), _AWS_KEY_ID),
    (("gh", "github_pat_"), _GITHUB),
    (("xox",), _SLACK),
    (("eyJ",), _JWT),
)


def mask_text(text: str) -> str:
    """``text`` with every secret-shaped part masked (JSON text is handled by the caller)."""
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
