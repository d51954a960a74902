"""A reference to protected content, as the event carries it in place of the content.

Why a string: a reference must fit every content field the schemas have, the text ones
(``message``, ``text``, ``error``) as well as the JSON ones (``prompt``, ``output``…), so the
Avro schemas and the audit chain need no change. The chain hashes the event as written, which
holds this reference (digest, key ID, size, store), never the content: erasing the content
leaves every link verifiable.

``rtref:1:<store>:<keyId>:<size>:<digest>`` — ``digest`` is the sha256 of the ciphertext (it
reveals nothing about the plaintext, and it names the object in the content store), ``size``
the plaintext's JSON size in bytes. Content whose own JSON text starts with the prefix is
always stored by reference, so a string in a content field that parses as a reference is one.
The digest's fixed length ends a reference, so references concatenated with each other or with
text (a streamed message's deltas, joined by capture) are still found one by one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PREFIX = "rtref:1:"

#: What a reader shows where the content of a reference was erased (or cannot be found).
ERASED = "[erased]"

PATTERN = re.compile(
    r"rtref:1:(?P<store>[a-z0-9][a-z0-9_-]{0,62}):(?P<key>dk-[0-9a-f]{32}):"
    r"(?P<size>[0-9]{1,15}):(?P<digest>[0-9a-f]{64})"
)


@dataclass(frozen=True, slots=True)
class ContentRef:
    """Where one field's content is kept and what unlocks it."""

    store: str
    key_id: str
    digest: str
    size: int

    def __str__(self) -> str:
        return f"{PREFIX}{self.store}:{self.key_id}:{self.size}:{self.digest}"

    @classmethod
    def parse(cls, text: str) -> ContentRef | None:
        """The reference ``text`` spells, or None when it is not one."""
        if not text.startswith(PREFIX):
            return None
        found = PATTERN.fullmatch(text)
        return None if found is None else cls.of(found)

    @classmethod
    def of(cls, found: re.Match[str]) -> ContentRef:
        return cls(found["store"], found["key"], found["digest"], int(found["size"]))


def as_reference(value: Any) -> ContentRef | None:
    """``value`` read as a reference (None for anything else, cheaply)."""
    if type(value) is str and value.startswith(PREFIX):
        return ContentRef.parse(value)
    return None


def key_marker(key_id: str) -> str:
    """The text every reference sealed by ``key_id`` holds (its fields are colon-delimited and
    the key ID's shape is unique to it): what an erasure looks for in a stored copy (a
    snapshot, a pointer, a cache entry) to tell whether it holds content of a destroyed key."""
    return f":{key_id}:"


def looks_like_reference(value: Any) -> bool:
    """Whether plain content would be mistaken for a reference (it must then go by one)."""
    return type(value) is str and value.startswith(PREFIX)
