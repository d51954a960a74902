"""Each run's link summaries, read from the audit store once per head: a sealed chain only
grows, so the summaries read at a head (its length and last hash) are that chain's for as
long as the head is the same. A run page and its live refreshes then cost one head read, not
a read of every link (10,000 for a long run).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from runtrail.audit.link import LinkSummary
from runtrail.audit.store import LinkStore

#: Runs whose summaries are kept (the most recently read).
KEPT_RUNS = 32


class Chains:
    def __init__(self, kept: int = KEPT_RUNS) -> None:
        self._kept = kept
        self._runs: OrderedDict[tuple[str, str], tuple[tuple[int, str], list[LinkSummary]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def summaries(self, audit: LinkStore, tenant: str, run_id: str) -> list[LinkSummary]:
        head = audit.head(tenant, run_id)
        if head is None:
            return []
        at, key = (head.length, head.hash), (tenant, run_id)
        with self._lock:
            kept = self._runs.get(key)
            if kept is not None and kept[0] == at:
                self._runs.move_to_end(key)
                return kept[1]
        links = audit.summaries(tenant, run_id)
        if len(links) != head.length:  # sealed meanwhile: keep it at the head next time
            return links
        with self._lock:
            self._runs[key] = (at, links)
            self._runs.move_to_end(key)
            while len(self._runs) > self._kept:
                self._runs.popitem(last=False)
        return links
