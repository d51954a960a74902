"""Data keys per (tenant, subject), wrapped by a tenant key: the interfaces.

Why two levels: content is sealed with a data key of its data subject (a run by default, or an
end user), so erasing one subject destroys one small key (crypto-shredding) and leaves every
other subject's content readable; the data keys are stored only wrapped by the tenant's key,
so a copy of the key store without the tenant key opens nothing, and rotating the tenant key
re-wraps the data keys without touching any content.

:class:`TenantKeyring` is the seam for a KMS (wrap and unwrap happen where the tenant key
lives); :class:`~runtrail.privacy.keys_file.FileTenantKeyring` is the embedded default.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class WrappedKey:
    """A data key sealed by the tenant key of ``version``."""

    version: str
    blob: bytes


@dataclass(frozen=True, slots=True)
class DataKey:
    key_id: str
    secret: bytes


class TenantKeyring(Protocol):
    """Where tenant keys live (files, a KMS); they never leave it."""

    def wrap(self, tenant: str, secret: bytes, associated: bytes) -> WrappedKey: ...

    def unwrap(self, tenant: str, wrapped: WrappedKey, associated: bytes) -> bytes: ...

    def rotate(self, tenant: str) -> str:
        """Make a new current tenant key; returns its version."""
        ...


class KeyStore(Protocol):
    """Data keys by (tenant, subject) and by key ID."""

    def data_key(self, tenant: str, subject: str) -> DataKey:
        """The subject's data key, made on first use."""
        ...

    def key_by_id(self, tenant: str, key_id: str) -> bytes | None:
        """The data key ``key_id`` of ``tenant``; None once destroyed (or never made)."""
        ...

    def key_id_of(self, tenant: str, subject: str) -> str | None: ...

    def destroy(self, tenant: str, subject: str) -> str | None:
        """Destroy the subject's data key (crypto-shredding); its key ID, None if none."""
        ...

    def key_ids(self, tenant: str) -> Iterator[str]: ...

    def rotate(self, tenant: str) -> int:
        """Rotate the tenant key and re-wrap every data key of the tenant; how many."""
        ...

    def sync(self) -> None:
        """Make every data key made so far durable (the publisher's group commit calls it)."""
        ...

    def close(self) -> None: ...


def associated(tenant: str, key_id: str) -> bytes:
    """What a sealed blob (content or data key) is bound to."""
    return f"runtrail\x00{tenant}\x00{key_id}".encode()
