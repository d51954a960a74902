"""The embedded key store: tenant keys and wrapped data keys as 0600 files in a 0700 folder.

Layout under the URL's folder (``file:///var/lib/runtrail/keys``)::

    tenants/<tenant>/<n>.key            the tenant key of version n (32 random bytes)
    data/<tenant>/keys/<keyId>.json     {tenantKeyVersion, wrapped}: a data key, wrapped
    data/<tenant>/subjects/<h>          the key ID of the subject whose sha256 is h

The subject is kept only as a digest, so the key store names no end user. A tenant key is
fsynced when made (losing it loses every data key it wraps); data key and subject files are
durable at the next :meth:`FileKeyStore.sync`, like the content they seal (see
:mod:`runtrail.privacy.content_file`: the publisher syncs both in each group commit of its
spool), and a rotation syncs before it returns; ``?fsync=false`` turns it off (a power cut may
then lose the last runs' keys, whose content then reads as erased). Two processes
making the same subject's key race on the subject file (created exclusively): the loser drops
its key and takes the winner's. Destroying a key deletes both files; rotating writes each
key file again, wrapped by the new tenant key, atomically.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from runtrail.files import fsync_dir, open_private, private_dir
from runtrail.persistence.url_options import as_bool, reject_unknown, split_options
from runtrail.persistence.urls import file_path
from runtrail.privacy.keys import DataKey, TenantKeyring, WrappedKey, associated
from runtrail.privacy.sealing import new_key, seal, unseal
from runtrail.sessions.naming import segment


class FileTenantKeyring:
    """Tenant keys as numbered 0600 files; the highest number is current."""

    def __init__(self, root: Path) -> None:
        self.root = private_dir(root)

    def _folder(self, tenant: str) -> Path:
        return private_dir(self.root / segment(tenant))

    def _versions(self, tenant: str) -> list[int]:
        return sorted(int(p.stem) for p in self._folder(tenant).glob("*.key"))

    def _key(self, tenant: str, version: str) -> bytes:
        return (self._folder(tenant) / f"{version}.key").read_bytes()

    def _current(self, tenant: str) -> str:
        versions = self._versions(tenant)
        return str(versions[-1]) if versions else self.rotate(tenant)

    def wrap(self, tenant: str, secret: bytes, associated: bytes) -> WrappedKey:
        version = self._current(tenant)
        return WrappedKey(version, seal(self._key(tenant, version), secret, associated))

    def unwrap(self, tenant: str, wrapped: WrappedKey, associated: bytes) -> bytes:
        return unseal(self._key(tenant, wrapped.version), wrapped.blob, associated)

    def rotate(self, tenant: str) -> str:
        versions = self._versions(tenant)
        version = (versions[-1] if versions else 0) + 1
        while True:
            try:
                with open_private(self._folder(tenant) / f"{version}.key", "xb") as out:
                    out.write(new_key())
                    out.flush()
                    os.fsync(out.fileno())
                fsync_dir(self._folder(tenant))
                return str(version)
            except FileExistsError:  # another process rotated at the same moment
                version += 1

    def retire_older(self, tenant: str) -> list[str]:
        """Delete every tenant key but the current one; the versions deleted."""
        current = self._current(tenant)
        older = [str(v) for v in self._versions(tenant) if str(v) != current]
        for version in older:
            self.retire(tenant, version)
        return older

    def retire(self, tenant: str, version: str) -> None:
        """Delete an old tenant key (after a rotation re-wrapped everything it wrapped)."""
        if version == self._current(tenant):
            raise ValueError("the current tenant key cannot be retired")
        (self._folder(tenant) / f"{version}.key").unlink(missing_ok=True)


class FileKeyStore:
    """Data keys of every tenant, wrapped by ``keyring`` (default: tenant keys beside them)."""

    def __init__(
        self, root: Path, keyring: TenantKeyring | None = None, *, fsync: bool = True
    ) -> None:
        self.root = private_dir(root)
        self._fsync = fsync
        #: files written since the last sync, and folders that got a new entry
        self._unsynced: set[Path] = set()
        self._new_entries: set[Path] = set()
        self.keyring: TenantKeyring = keyring or FileTenantKeyring(self.root / "tenants")
        self._cache: dict[tuple[str, str], bytes] = {}
        #: (tenant, subject) -> the key this process seals with (a publisher's hot path reads
        #: no file per field; a key destroyed by another process is not noticed here: erase a
        #: run once it ended)
        self._sealing: dict[tuple[str, str], DataKey] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> FileKeyStore:
        base, options = split_options(url, overrides)
        keyring = options.pop("keyring", None)
        fsync = as_bool(options.pop("fsync", True))
        reject_unknown(options, "key store")
        return cls(file_path(base), keyring, fsync=fsync)

    def _tenant(self, tenant: str) -> Path:
        return self.root / "data" / segment(tenant)

    def _subject_file(self, tenant: str, subject: str) -> Path:
        return self._tenant(tenant) / "subjects" / hashlib.sha256(subject.encode()).hexdigest()

    def _key_file(self, tenant: str, key_id: str) -> Path:
        return self._tenant(tenant) / "keys" / f"{key_id}.json"

    def key_id_of(self, tenant: str, subject: str) -> str | None:
        try:
            return self._subject_file(tenant, subject).read_text().strip() or None
        except FileNotFoundError:
            return None

    def data_key(self, tenant: str, subject: str) -> DataKey:
        with self._lock:
            sealing = self._sealing.get((tenant, subject))
        if sealing is not None:
            return sealing
        found = self._data_key(tenant, subject)
        with self._lock:
            self._sealing[(tenant, subject)] = found
        return found

    def _data_key(self, tenant: str, subject: str) -> DataKey:
        known = self.key_id_of(tenant, subject)
        if known is not None:
            secret = self.key_by_id(tenant, known)
            if secret is not None:
                return DataKey(known, secret)
        key_id = "dk-" + secrets.token_hex(16)
        secret = new_key()
        self._write(tenant, key_id, self.keyring.wrap(tenant, secret, associated(tenant, key_id)))
        subject_file = self._subject_file(tenant, subject)
        self._written(subject_file)
        private_dir(subject_file.parent)
        try:
            with open_private(subject_file, "x") as out:
                out.write(key_id)
        except FileExistsError:  # another process made this subject's key first: take it
            self._key_file(tenant, key_id).unlink(missing_ok=True)
            winner = self.key_id_of(tenant, subject)
            found = self.key_by_id(tenant, winner) if winner else None
            if winner is None or found is None:
                raise
            return DataKey(winner, found)
        with self._lock:
            self._cache[(tenant, key_id)] = secret
        return DataKey(key_id, secret)

    def _write(self, tenant: str, key_id: str, wrapped: WrappedKey) -> None:
        path = self._key_file(tenant, key_id)
        self._written(path)
        private_dir(path.parent)
        body = {"tenantKeyVersion": wrapped.version, "wrapped": base64.b64encode(wrapped.blob)}
        data = json.dumps(body, default=bytes.decode).encode()
        beside = path.with_name(f".{path.name}.{os.getpid()}")
        with open_private(beside, "wb") as out:
            out.write(data)
        os.replace(beside, path)

    def _written(self, path: Path) -> None:
        """Note a file about to be written, and each folder that gets a new entry for it."""
        if not self._fsync:
            return
        with self._lock:
            self._unsynced.add(path)
            probe = path
            while probe != self.root and not probe.exists():
                self._new_entries.add(probe.parent)
                probe = probe.parent
            self._new_entries.add(path.parent)  # a replaced file is a new entry too

    def sync(self) -> None:
        """Make every data key and subject file written so far durable (files, then folders)."""
        with self._lock:
            files, self._unsynced = self._unsynced, set()
            folders, self._new_entries = self._new_entries, set()
        try:
            for path in files:
                with suppress(FileNotFoundError):  # destroyed meanwhile
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            for folder in folders:
                with suppress(FileNotFoundError):
                    fsync_dir(folder)
        except BaseException:
            with self._lock:
                self._unsynced |= files
                self._new_entries |= folders
            raise

    def key_by_id(self, tenant: str, key_id: str) -> bytes | None:
        with self._lock:
            cached = self._cache.get((tenant, key_id))
        path = self._key_file(tenant, key_id)
        if not path.exists():  # destroyed, maybe by another process: forget it here too
            with self._lock:
                self._cache.pop((tenant, key_id), None)
            return None
        if cached is not None:
            return cached
        body = json.loads(path.read_bytes())
        wrapped = WrappedKey(str(body["tenantKeyVersion"]), base64.b64decode(body["wrapped"]))
        secret = self.keyring.unwrap(tenant, wrapped, associated(tenant, key_id))
        with self._lock:
            self._cache[(tenant, key_id)] = secret
        return secret

    def destroy(self, tenant: str, subject: str) -> str | None:
        key_id = self.key_id_of(tenant, subject)
        if key_id is None:
            return None
        _shred(self._key_file(tenant, key_id))
        self._subject_file(tenant, subject).unlink(missing_ok=True)
        with self._lock:
            self._cache.pop((tenant, key_id), None)
            self._sealing.pop((tenant, subject), None)
        return key_id

    def key_ids(self, tenant: str) -> Iterator[str]:
        for path in sorted((self._tenant(tenant) / "keys").glob("dk-*.json")):
            yield path.stem

    def rotate(self, tenant: str) -> int:
        self.keyring.rotate(tenant)
        count = 0
        for key_id in list(self.key_ids(tenant)):
            secret = self.key_by_id(tenant, key_id)
            if secret is None:
                continue
            self._write(
                tenant, key_id, self.keyring.wrap(tenant, secret, associated(tenant, key_id))
            )
            count += 1
        self.sync()  # the older tenant keys may be retired next
        return count

    def close(self) -> None:
        self.sync()
        with self._lock:
            self._cache.clear()
            self._sealing.clear()


def _shred(path: Path) -> None:
    """Overwrite a key file before unlinking it (a best effort on journaling file systems;
    the key is wrapped anyway, so what may remain on disk needs the tenant key)."""
    with suppress(FileNotFoundError):
        size = path.stat().st_size
        with open(path, "r+b") as out:
            out.write(os.urandom(size))
            out.flush()
            os.fsync(out.fileno())
        path.unlink()
