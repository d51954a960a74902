"""Readers resolve references where the caller is entitled to the tenant.

One walk for every reader (capture records, cache entries, event forms, session snapshots):
each string that is a reference becomes the content, or :data:`~runtrail.privacy.reference.ERASED`
when that content was erased, pruned or cannot be opened here (no content store configured).
A reader that resolves nothing (no reference in the value) gets the value back unchanged.
"""

from __future__ import annotations

from typing import Any

from runtrail.privacy.reference import ERASED, as_reference
from runtrail.privacy.vault import ContentVault


class Resolver:
    def __init__(self, vault: ContentVault | None) -> None:
        self.vault = vault

    def one(self, tenant: str, text: str) -> Any:
        ref = as_reference(text)
        if ref is None:
            return text
        return ERASED if self.vault is None else self.vault.resolve(tenant, ref)

    def value(self, tenant: str, value: Any) -> Any:
        """``value`` with every reference in it resolved (a new value; the input is kept)."""
        kind = type(value)
        if kind is str:
            return self.one(tenant, value)
        if kind is dict:
            return {k: self.value(tenant, v) for k, v in value.items()}
        if kind is list:
            return [self.value(tenant, v) for v in value]
        return value

    def close(self) -> None:
        if self.vault is not None:
            self.vault.close()


def holds_erased(value: Any) -> bool:
    """Whether a resolved value lost content to erasure (a replay must not call out then)."""
    kind = type(value)
    if kind is str:
        return bool(value == ERASED)
    if kind is dict:
        return any(holds_erased(v) for v in value.values())
    if kind is list:
        return any(holds_erased(v) for v in value)
    return False
