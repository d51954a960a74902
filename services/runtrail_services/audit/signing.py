"""The tree head signing key: loaded from its file, or generated there on first use.

A generated key is written with mode 0600 and never over an existing file (two processes
starting at once both end up with the one that won the race); its public key goes beside it
as ``<key>.pub`` (PEM) so verifiers can be given it, and the ``name+id+key`` verifier string
is logged. Losing the key does not break the links, only the ability to sign with the same
identity: keep it, and hand out the public key.
"""

from __future__ import annotations

import logging
from pathlib import Path

from runtrail.audit.keys import (
    generate_private_key,
    load_signer,
    write_private_key,
    write_public_key,
)
from runtrail.audit.note import NoteSigner
from runtrail.files import private_dir

log = logging.getLogger(__name__)


def public_key_path(key_path: Path) -> Path:
    """Where the public key of ``key_path`` is written: the same name plus ``.pub``."""
    return key_path.with_name(key_path.name + ".pub")


def create_key(key_path: Path, name: str) -> NoteSigner:
    """Generate a key at ``key_path`` (refuses to overwrite) and its ``.pub``; the signer."""
    private_dir(key_path.parent)
    private = generate_private_key()
    write_private_key(key_path, private)
    pub = public_key_path(key_path)
    if not pub.exists():
        write_public_key(pub, private.public_key())
    signer = NoteSigner(name, private)
    log.warning(
        "generated tree head key %s (public key %s); verifier key: %s",
        key_path,
        pub,
        signer.verifier.vkey(),
    )
    return signer


def load_or_create_signer(key_path: Path, name: str) -> NoteSigner:
    """The signer whose key is at ``key_path``, generating the key if there is none yet."""
    if not key_path.exists():
        try:
            return create_key(key_path, name)
        except FileExistsError:
            pass  # another process created it first: use theirs
    return load_signer(key_path, name)
