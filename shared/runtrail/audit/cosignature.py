"""Witness cosignatures (C2SP tlog-cosignature, ``cosignature/v1``) on log checkpoints.

A witness that checked a checkpoint is consistent with everything it saw before adds a line
``— <witness name> <base64(key ID || timestamp || signature)>`` to the checkpoint's signed
note. The signature is Ed25519 over ``cosignature/v1\\ntime <timestamp>\\n<checkpoint body>``
(the timestamp a big-endian uint64 of seconds, also written in the line); the key ID is
``SHA-256(name || 0x0A || 0x04 || public key)[:4]`` and the witness's verifier key is
``<name>+<hex key ID>+<base64(0x04 || public key)>``. A checkpoint is *witnessed* once
``quorum`` of the trusted witnesses cosigned it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature

from runtrail.audit.errors import NoteError
from runtrail.audit.note import SIGNATURE_PREFIX, NamedPublicKey, NoteSigner

COSIGNATURE_V1 = 0x04


def cosigned_message(body: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


class WitnessVerifier(NamedPublicKey):
    """A trusted witness: the name it cosigns under and its Ed25519 public key (type 0x04)."""

    key_type = COSIGNATURE_V1
    role = "witness"
    type_refusal = "a witness key is a cosignature/v1 Ed25519 key (type 0x04)"

    @classmethod
    def of_signer(cls, signer: NoteSigner) -> WitnessVerifier:
        """The cosignature key of a witness whose signing key is ``signer``'s."""
        return cls(signer.name, signer.private_key.public_key())

    def timestamp(self, line: str, body: str) -> int | None:
        """The time this witness cosigned ``body`` in ``line``, or None if it did not."""
        if not line.startswith(f"{SIGNATURE_PREFIX}{self.name} "):
            return None
        try:
            blob = base64.b64decode(line.rstrip("\n").rsplit(" ", 1)[1], validate=True)
        except (binascii.Error, ValueError, IndexError):
            return None
        if len(blob) != 4 + 8 + 64 or blob[:4] != self.key_id:
            return None
        timestamp = int.from_bytes(blob[4:12], "big")
        try:
            self.public_key.verify(blob[12:], cosigned_message(body, timestamp))
        except InvalidSignature:
            return None
        return timestamp


def signature_lines(note: str) -> tuple[str, list[str]]:
    """A signed note's body and its signature lines (each without its newline)."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("not a signed note")
    return note[: split + 1], note[split + 2 : -1].split("\n")


def witnessed_by(note: str, witnesses: Sequence[WitnessVerifier]) -> dict[str, int]:
    """The trusted witnesses whose cosignature in ``note`` verifies, with their timestamps."""
    body, lines = signature_lines(note)
    found: dict[str, int] = {}
    for line in lines:
        for witness in witnesses:
            timestamp = witness.timestamp(line, body)
            if timestamp is not None:
                found[witness.name] = timestamp
    return found


def with_cosignatures(note: str, lines: Sequence[str]) -> str:
    """``note`` with cosignature lines added (each once)."""
    _, present = signature_lines(note)
    new = [line for line in dict.fromkeys(lines) if line not in present]
    return note + "".join(f"{line}\n" for line in new)
