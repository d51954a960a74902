"""AES-256-GCM sealing of content and of data keys (``cryptography``).

A sealed blob is ``RTC1 | nonce (12) | ciphertext+tag``; the associated data binds it to its
place (tenant, key ID), so a blob copied under another tenant or key does not open. A fresh
random nonce per seal: a data key seals at most a run's or a subject's content, far below
GCM's 2^32 random-nonce bound.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from runtrail.extras import require

MAGIC = b"RTC1"
NONCE_BYTES = 12
KEY_BYTES = 32


class Unsealable(Exception):
    """The blob is not one this key sealed for this place (tampered, wrong key, wrong place)."""


@lru_cache(maxsize=1024)  # a publisher seals many fields with one run's key
def _aesgcm(key: bytes) -> Any:
    aead = require("cryptography.hazmat.primitives.ciphers.aead", "protected content")
    return aead.AESGCM(key)


def new_key() -> bytes:
    return os.urandom(KEY_BYTES)


def seal(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return MAGIC + nonce + bytes(_aesgcm(key).encrypt(nonce, plaintext, associated))


def unseal(key: bytes, blob: bytes, associated: bytes) -> bytes:
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + NONCE_BYTES + 16:
        raise Unsealable("not a sealed blob")
    nonce = blob[len(MAGIC) : len(MAGIC) + NONCE_BYTES]
    invalid = require("cryptography.exceptions", "protected content").InvalidTag
    try:
        return bytes(_aesgcm(key).decrypt(nonce, blob[len(MAGIC) + NONCE_BYTES :], associated))
    except invalid as exc:
        raise Unsealable("the blob does not open with this key here") from exc
