"""What one erasure finds in one store: the holders (sessions, checkpoint threads) named by the
caller, then those the store says hold the erased run or a reference sealed by the destroyed
key. The store is asked once, before the key is destroyed: after that its marker matches the
same references, but the erasure's journal already holds what was found."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from runtrail.privacy.reference import key_marker


@dataclass(slots=True)
class ErasedHolders:
    tenant: str
    runs: Collection[str]
    #: the URL of the store searched
    store_url: str
    #: the holders named by the caller, then those the store says hold the erasure
    found: set[str] = field(default_factory=set)
    _searched: bool = field(default=False, init=False)

    def search(self, key_id: str | None) -> set[str]:
        """Add the holders the store says hold the erasure (asked once)."""
        if not self._searched:
            self.found.update(self._holding(key_marker(key_id) if key_id else None))
            self._searched = True
        return self.found

    def _holding(self, marker: str | None) -> Iterable[str]:
        """The store's holders of ``runs`` or of references carrying ``marker``."""
        raise NotImplementedError
