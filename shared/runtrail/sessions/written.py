"""The bytes a store last wrote for each snapshot, so that replacing it can check it cheaply.

Before a save replaces a stored snapshot the store verifies the stored content (an edited
file is evidence, never overwritten), which is one SHA-256 over the whole snapshot per save.
A snapshot this process wrote and nobody changed since is byte for byte what it wrote: one
comparison of the bytes decides it the same way, and anything else (another writer's save,
an edit, a restart) gets the full check. Bounded in total size, oldest forgotten first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

#: Most bytes remembered: past it, the oldest entries are forgotten (their next save hashes).
MAX_BYTES = 256 * 1024 * 1024


class WrittenSnapshots:
    """Per place (a path, a row key), the digest and bytes last written there."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max = max_bytes
        self._held: OrderedDict[Hashable, tuple[str, bytes]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def wrote(self, where: Hashable, digest: str, data: bytes) -> None:
        with self._lock:
            old = self._held.pop(where, None)
            if old is not None:
                self._size -= len(old[1])
            if len(data) > self._max:
                return
            self._held[where] = (digest, data)
            self._size += len(data)
            while self._size > self._max:
                _, (_, dropped) = self._held.popitem(last=False)
                self._size -= len(dropped)

    def forget(self, where: Hashable) -> None:
        with self._lock:
            old = self._held.pop(where, None)
            if old is not None:
                self._size -= len(old[1])

    def digest_if_unchanged(self, where: Hashable, data: bytes) -> str | None:
        """The digest of ``data`` if it is exactly what was last written at ``where``."""
        with self._lock:
            held = self._held.get(where)
        if held is None or held[1] != data:
            return None
        return held[0]
