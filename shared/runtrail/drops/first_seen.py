"""Reasons reported once: a steady stream of drops costs one log line per reason, not one per
batch, while their counts go on in the stats or metrics that the line names."""

from __future__ import annotations

from collections.abc import Iterable


class FirstSeen:
    """Remembers which reasons were reported; :meth:`new` answers each one once."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def new(self, reasons: Iterable[str]) -> list[str]:
        """Those of ``reasons`` not seen before, sorted; from now on they are seen."""
        new = sorted(set(reasons) - self._seen)
        self._seen.update(new)
        return new
