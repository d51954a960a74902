"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 signatures.

A signed note is a UTF-8 text ending in ``\\n``, a blank line, then one or more lines
``— <key name> <base64(key ID || signature)>\\n`` (an em dash, U+2014). The signature is
Ed25519 (RFC 8032) over the text bytes, final newline included, blank line excluded; the key ID
is ``SHA-256(key name || 0x0A || 0x01 || 32-byte public key)[:4]``. Keys also have the
text forms of Go's ``golang.org/x/mod/sumdb/note``, so tooling from that ecosystem can check
our tree heads: verifier ``<name>+<hex key ID>+<base64(0x01 || public key)>``, signer
``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || seed)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from runtrail.audit.errors import NoteError

ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "
#: More signatures than any note of ours carries; C2SP asks verifiers to accept at least 16.
MAX_SIGNATURES = 100


def check_key_name(name: str) -> str:
    """A key name is non-empty with no Unicode space and no ``+``."""
    if not name or "+" in name or any(ch.isspace() for ch in name):
        raise NoteError(f"invalid key name {name!r}: non-empty, no spaces, no '+'")
    return name


def key_id(name: str, public_key: bytes, key_type: int = ED25519) -> bytes:
    """``SHA-256(name || 0x0A || key type || public key)[:4]`` (type 0x01: a note key)."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([key_type]) + public_key).digest()[:4]


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError(f"bad base64: {exc}") from exc


def _typed_key(material: str, key_type: int, refusal: str) -> bytes:
    """The 32 key bytes of ``base64(type || key)``; :class:`NoteError` ``refusal`` unless the
    type is ``key_type``."""
    key = _b64decode(material)
    if len(key) != 33 or key[0] != key_type:
        raise NoteError(refusal)
    return key[1:]


@dataclass(frozen=True)
class NamedPublicKey:
    """An Ed25519 public key and the name it signs under. Its type byte (``key_type``) is part
    of its key ID and of its text form, so a key of one use cannot pass for one of another."""

    name: str
    public_key: Ed25519PublicKey

    key_type: ClassVar[int] = ED25519
    #: What error messages call such a key.
    role: ClassVar[str] = "verifier"
    #: The error for a key whose text form holds another type.
    type_refusal: ClassVar[str] = "verifier key is not an Ed25519 key (type 0x01, 32 bytes)"

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key.public_bytes_raw(), self.key_type)

    def vkey(self) -> str:
        """``<name>+<hex key ID>+<base64(key type || public key)>``."""
        material = base64.b64encode(bytes([self.key_type]) + self.public_key.public_bytes_raw())
        return f"{self.name}+{self.key_id.hex()}+{material.decode()}"

    @classmethod
    def from_vkey(cls, vkey: str) -> Self:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3:
            raise NoteError(f"a {cls.role} key is <name>+<hex id>+<base64 key>")
        name, hex_id, material = parts
        key = _typed_key(material, cls.key_type, cls.type_refusal)
        verifier = cls(name, Ed25519PublicKey.from_public_bytes(key))
        if verifier.key_id.hex() != hex_id:
            raise NoteError(f"{cls.role} key ID {hex_id} does not match its name and key")
        return verifier


class NoteVerifier(NamedPublicKey):
    """A trusted key: the name it signs notes under and its Ed25519 public key."""

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            self.public_key.verify(signature, text)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """A signing key and the name its signatures carry."""

    name: str
    private_key: Ed25519PrivateKey

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, self.private_key.public_key())

    def signature_line(self, text: bytes) -> str:
        blob = self.verifier.key_id + self.private_key.sign(text)
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"

    def skey(self) -> str:
        """``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || seed)>`` (keep it secret)."""
        seed = self.private_key.private_bytes_raw()
        material = base64.b64encode(bytes([ED25519]) + seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{material}"

    @classmethod
    def from_skey(cls, skey: str) -> NoteSigner:
        parts = skey.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key is PRIVATE+KEY+<name>+<hex id>+<base64 key>")
        name, hex_id, material = parts[2:]
        refusal = "signer key is not an Ed25519 key (type 0x01, 32 bytes)"
        seed = _typed_key(material, ED25519, refusal)
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(seed))
        if signer.verifier.key_id.hex() != hex_id:
            raise NoteError(f"signer key ID {hex_id} does not match its name and key")
        return signer


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("note text must end with a newline")
    if any(ord(ch) < 0x20 and ch != "\n" for ch in text):
        raise NoteError("note contains control characters other than newline")


def sign_note(text: str, signers: NoteSigner | Sequence[NoteSigner]) -> str:
    """The signed note: ``text``, a blank line, one signature line per signer."""
    _check_text(text)
    group = [signers] if isinstance(signers, NoteSigner) else list(signers)
    if not group:
        raise NoteError("a signed note needs at least one signer")
    body = text.encode()
    return text + "\n" + "".join(signer.signature_line(body) for signer in group)


def open_note(note: str, verifiers: NoteVerifier | Sequence[NoteVerifier]) -> str:
    """The note's text, if a trusted key signed it; :class:`NoteError` otherwise.

    Signatures by unknown keys are ignored; one by a known key that fails rejects the note.
    """
    trusted = [verifiers] if isinstance(verifiers, NoteVerifier) else list(verifiers)
    _check_text(note)
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("no blank line separates the note text from its signatures")
    text, block = note[: split + 1], note[split + 2 :]
    lines = block.split("\n")
    if lines[-1] != "" or len(lines) < 2:
        raise NoteError("the note has no signature lines")
    if len(lines) - 1 > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    body = text.encode()
    verified = False
    for line in lines[:-1]:
        name, blob = _parse_signature_line(line)
        for verifier in trusted:
            if verifier.name == name and verifier.key_id == blob[:4]:
                if not verifier.verify(body, blob[4:]):
                    raise NoteError(f"signature by {name} does not verify")
                verified = True
    if not verified:
        raise NoteError("no signature by a trusted key")
    return text


def _parse_signature_line(line: str) -> tuple[str, bytes]:
    if not line.startswith(SIGNATURE_PREFIX):
        raise NoteError(f"malformed signature line {line[:40]!r}")
    name, sep, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
    if not sep or " " in encoded:
        raise NoteError(f"malformed signature line {line[:40]!r}")
    check_key_name(name)
    blob = _b64decode(encoded)
    if len(blob) < 5:
        raise NoteError("signature too short")
    return name, blob
