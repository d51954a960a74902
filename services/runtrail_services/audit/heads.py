"""The head (length, last hash) of each run this member is sealing, kept in memory.

A run's head is read from the store the first time the run is seen (a batch of runs in one
query) and then advanced by every link sealed. Heads are remembered per partition so that a
revoked or lost partition takes its runs' heads with it: the next owner, or this member later,
reads them again from the store — the only place a head is true once links are flushed. The
number of heads is bounded; the least recently used are forgotten, but only after a flush,
when none of them has links still waiting.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from runtrail.audit.link import RunHead, genesis_head
from runtrail.audit.store import LinkStore
from runtrail.runtime.delivery import Partition

RunKey = tuple[str, str]


class HeadCache:
    """Run heads of the partitions this member owns, loaded on first sight, LRU-bounded."""

    def __init__(self, store: LinkStore, max_runs: int) -> None:
        self._store = store
        self._max = max_runs
        self._heads: OrderedDict[RunKey, RunHead] = OrderedDict()
        self._runs_of: dict[Partition, set[RunKey]] = {}
        self.started = 0  # runs seen with no link in the store yet

    def __len__(self) -> int:
        return len(self._heads)

    def load(self, runs: Iterable[tuple[Partition, RunKey]]) -> None:
        """Make sure every (partition, run) given has its head in memory (one store query)."""
        missing: dict[RunKey, None] = {}  # in first-seen order, each once
        heads, runs_of = self._heads, self._runs_of
        for partition, key in runs:
            known = runs_of.get(partition)
            if known is None:
                known = runs_of[partition] = set()
            known.add(key)
            if key not in heads:
                missing[key] = None
        if not missing:
            return
        stored = self._store.heads_of(list(missing))
        for key in missing:
            head = stored.get(key)
            if head is None:
                head = genesis_head(*key)
                self.started += 1
            self._heads[key] = head

    def get(self, key: RunKey) -> RunHead:
        head = self._heads[key]
        self._heads.move_to_end(key)
        return head

    def advance(self, head: RunHead) -> None:
        self._heads[(head.tenant_id, head.run_id)] = head

    def drop_partitions(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            for key in self._runs_of.pop(partition, set()):
                self._heads.pop(key, None)

    def clear(self) -> None:
        self._heads.clear()
        self._runs_of.clear()

    def trim(self) -> None:
        """Forget the least recently used heads beyond the bound (call only after a flush)."""
        excess = len(self._heads) - self._max
        if excess <= 0:
            return
        for _ in range(excess):
            self._heads.popitem(last=False)
        for partition, keys in list(self._runs_of.items()):
            kept = {key for key in keys if key in self._heads}
            if kept:
                self._runs_of[partition] = kept
            else:
                del self._runs_of[partition]
