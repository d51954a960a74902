"""Which key names hold secrets: the words of a key, not a fixed list of spellings.

Why: agents and providers spell the same secret many ways (``db_password``, ``dbPassword``,
``X-API-Key``, ``aws_secret_access_key``), while near spellings are data (``input_tokens``,
``idempotencyKey``). One rule on the key's words serves the redactor's walk, its ``key=value``
rule inside strings, and ``runtrail settings``.
"""

from __future__ import annotations

import functools
import re

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
