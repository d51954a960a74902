"""Ed25519 key files for tree head signing: generate, save and load.

A key file is either PEM (PKCS#8 private / SubjectPublicKeyInfo public, unencrypted) or the raw
32 bytes (the RFC 8032 seed, or the public key). Private keys are written with mode 0600 and
never overwrite an existing file, so a key cannot be replaced by accident.

A private key that others may read, or that group or others may write, is refused when
loaded, as ssh refuses one: anyone who could read it could sign tree heads as this service.
A group-readable key (0640, 0440) is accepted with a warning, because that is how Kubernetes
hands a Secret to a non-root pod (owner root, group fsGroup, mode 0440).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from runtrail.audit.errors import NoteError
from runtrail.audit.note import NoteSigner, NoteVerifier

log = logging.getLogger(__name__)

KeyFormat = Literal["pem", "raw"]
Key = TypeVar("Key", Ed25519PrivateKey, Ed25519PublicKey)
_PEM_MARK = b"-----BEGIN"


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def write_private_key(path: str | Path, key: Ed25519PrivateKey, fmt: KeyFormat = "pem") -> None:
    """Write a new private key file (0600); refuses to overwrite."""
    if fmt == "pem":
        data = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    else:
        data = key.private_bytes_raw()
    _write_new(Path(path), data, 0o600)


def write_public_key(path: str | Path, key: Ed25519PublicKey, fmt: KeyFormat = "pem") -> None:
    """Write a new public key file (0644); refuses to overwrite."""
    if fmt == "pem":
        data = key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    else:
        data = key.public_bytes_raw()
    _write_new(Path(path), data, 0o644)


def check_private_key_mode(path: str | Path) -> None:
    """Refuse a private key others can read (or group/others can write); warn if group-readable."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & (stat.S_IRWXO | stat.S_IWGRP):
        raise NoteError(
            f"private key {path} has mode {mode:04o}: others can read or change it, so it is "
            f"refused (run: chmod 600 {path}; if it leaked, make a new key)"
        )
    if mode & stat.S_IRGRP:
        log.warning("private key %s has mode %04o: its group can read it", path, mode)


def _read_key(
    path: str | Path,
    kind: type[object],
    from_pem: Callable[[bytes], object],
    from_raw: Callable[[bytes], Key],
) -> Key:
    """A key of ``kind`` (the abstract class, so checked at run time) from a PEM file or from
    its raw 32 bytes; another key type (an RSA PEM) or length is refused by name."""
    data = Path(path).read_bytes()
    if data.lstrip().startswith(_PEM_MARK):
        key = from_pem(data)
        if not isinstance(key, kind):
            raise NoteError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
        return cast(Key, key)
    if len(data) == 32:
        return from_raw(data)
    raise NoteError(f"{path} is neither PEM nor a raw 32-byte Ed25519 key")


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM or raw 32-byte file whose mode keeps it private."""
    check_private_key_mode(path)
    return _read_key(
        path,
        Ed25519PrivateKey,
        lambda data: load_pem_private_key(data, password=None),
        Ed25519PrivateKey.from_private_bytes,
    )


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM or raw 32-byte file."""
    return _read_key(
        path, Ed25519PublicKey, load_pem_public_key, Ed25519PublicKey.from_public_bytes
    )


def load_signer(path: str | Path, name: str) -> NoteSigner:
    """A tree head signer named ``name`` from a private key file."""
    return NoteSigner(name, load_private_key(path))


def load_verifier(path: str | Path, name: str) -> NoteVerifier:
    """A tree head verifier named ``name`` from a public key file."""
    return NoteVerifier(name, load_public_key(path))
