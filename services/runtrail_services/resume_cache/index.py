"""What the lookup API reads: the store, plus what was consumed but not yet flushed.

The consume loop makes changes durable only at flush (every commit interval), but a lookup
should not wait for that: the *pending* batch — derived from events already durable in Kafka —
is consulted first, then the store. So a read-your-writes lookup waits only until the events it
names are *consumed*, not flushed.

Read-your-writes: a lookup names, per partition of the events topic, the highest offset that
must have been consumed. A hit never waits. A miss is only answered once every named partition
is consumed past its offset — by this instance (its in-memory position) or, for partitions
another instance of the group owns, by whoever made the shared store durable that far (the
stored offsets, polled). Otherwise :class:`NotCaughtUp` after the timeout.

Positions come from the runtime's checkpoint, which the service watches
(:meth:`LookupIndex.advanced`); it counts the messages the service never sees — dead-lettered, or dropped as duplicates — so a
lookup naming the offset of such a message is answered as soon as the consume loop is past it,
not after the timeout. Only an instance that really is behind makes a lookup wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Unpack

import orjson

from runtrail.resume.builder import WriteBatch
from runtrail.resume.entry import CacheEntry, Intent, RunState
from runtrail.resume.errors import NotCaughtUp
from runtrail.resume.keys import Kind, Scope
from runtrail.resume.remote import Ask, Lookup
from runtrail.resume.store import CacheErasure, CacheStore

#: How often a waiting lookup re-reads the stored offsets (partitions owned by other instances).
STORE_POLL_S = 0.05


class LookupIndex:
    """Thread-safe view for the HTTP threads; the consume thread feeds it (see the docstring)."""

    def __init__(
        self,
        store: CacheStore,
        topic: str,
        unanswerable: Callable[[CacheEntry], bool] | None = None,
    ) -> None:
        self.store = store
        self.topic = topic
        #: whether an entry's answer holds content that no longer opens (erased, pruned):
        #: such an entry is never served, a lookup finding it is a miss
        self.unanswerable = unanswerable
        self._cond = threading.Condition()
        self._pending = WriteBatch()
        self._latest: dict[tuple[str, Kind, str], CacheEntry] = {}
        self._positions: dict[int, int] = {}

    # --- the consume thread ---------------------------------------------------------------
    def assigned(self, positions: Mapping[int, int]) -> None:
        with self._cond:
            self._positions.update(positions)
            self._cond.notify_all()

    def revoked(self, partitions: list[int]) -> None:
        with self._cond:
            for p in partitions:
                self._positions.pop(p, None)

    def consumed(self, delta: WriteBatch) -> None:
        """A processed batch's changes become visible (its positions follow in
        :meth:`advanced`, so a lookup woken by them finds these changes)."""
        with self._cond:
            pending = self._pending
            for ek, entry in delta.entries.items():
                if ek not in pending.entries:
                    pending.entries[ek] = entry
                    self._latest[(entry.tenant_id, entry.kind, entry.key)] = entry
            pending.intents.update(delta.intents)
            pending.models.update(delta.models)
            for run, (seq, partition) in delta.runs.items():
                held = pending.runs.get(run)
                if held is None or seq > held[0]:
                    pending.runs[run] = (seq, partition)
            self._cond.notify_all()

    def advanced(self, positions: Mapping[int, int]) -> None:
        """The consume loop reached these next offsets (every message counted, decodable or
        not): they are stored at the next flush, and waiting lookups wake."""
        with self._cond:
            for p, position in positions.items():
                if position > self._positions.get(p, -1):
                    self._positions[p] = position
                self._pending.offsets[(self.topic, p)] = position
            self._cond.notify_all()

    def erase(self, erasure: CacheErasure) -> None:
        """An erasure was consumed: what the pending batch holds of it is dropped (its entries,
        intents and open model nodes), so no lookup finds it and no flush stores it; the store
        deletes its own at the next flush (:meth:`CacheStore.apply`)."""
        with self._cond:
            pending = self._pending
            for ek in [k for k, e in pending.entries.items() if _covers(erasure, e)]:
                entry = pending.entries.pop(ek)
                latest = (entry.tenant_id, entry.kind, entry.key)
                if self._latest.get(latest) is entry:
                    del self._latest[latest]
            for ik in [k for k, v in pending.intents.items() if _covers(erasure, v)]:
                del pending.intents[ik]
            for nk in [k for k, n in pending.models.items() if _covers(erasure, n)]:
                del pending.models[nk]

    def pending(self) -> WriteBatch:
        with self._cond:
            return self._pending

    def flushed(self, batch: WriteBatch) -> None:
        """``batch`` (the pending one) is in the store now: stop overlaying it."""
        with self._cond:
            if self._pending is batch:
                self._pending = WriteBatch()
                self._latest = {}
            self._cond.notify_all()

    # --- the HTTP threads -----------------------------------------------------------------
    def _overlay_entry(
        self, tenant: str, run_id: str, kind: Kind, key: str, scope: Scope
    ) -> CacheEntry | None:
        with self._cond:
            if scope is Scope.RUN:
                return self._pending.entries.get((tenant, run_id, kind, key))
            return self._latest.get((tenant, kind, key))

    def _find(
        self, tenant: str, run_id: str, kind: Kind, key: str, scope: Scope
    ) -> CacheEntry | None:
        entry = self._overlay_entry(tenant, run_id, kind, key, scope)
        if entry is None:
            entry = self.store.get_entry(tenant, run_id, kind, key, scope)
        return entry

    def _answerable(self, entry: CacheEntry | None) -> bool:
        """Whether ``entry`` may be served: its answer does not read ``[erased]`` (content
        erased or pruned), which an agent would take for a model's or a tool's answer."""
        return entry is not None and (self.unanswerable is None or not self.unanswerable(entry))

    def caught_up(self, min_offsets: Mapping[int, int], timeout_s: float) -> bool:
        """Wait until every partition is consumed past its offset; False on timeout."""
        if not min_offsets:
            return True
        deadline = time.monotonic() + timeout_s
        stored: dict[int, int] = {}
        next_poll = 0.0
        while True:
            with self._cond:
                behind = [
                    p
                    for p, o in min_offsets.items()
                    if max(self._positions.get(p, -1), stored.get(p, -1)) <= o
                ]
                if not behind:
                    return True
                now = time.monotonic()
                if now >= deadline:
                    return False
                owned_all = all(p in self._positions for p in behind)
                if owned_all or now < next_poll:
                    self._cond.wait(min(deadline - now, STORE_POLL_S))
                    continue
            stored = self.store.offsets(self.topic)
            next_poll = time.monotonic() + STORE_POLL_S

    def lookup(self, *, timeout_s: float, **ask: Unpack[Ask]) -> Lookup:
        """A hit at once; a miss only once caught up (else :class:`NotCaughtUp`)."""
        tenant, run_id, kind, key = ask["tenant"], ask["run_id"], ask["kind"], ask["key"]
        scope, min_offsets = ask["scope"], ask["min_offsets"]
        entry = self._find(tenant, run_id, kind, key, scope)
        if entry is not None and self._answerable(entry):
            return Lookup(entry)
        if not self.caught_up(min_offsets, timeout_s):
            raise NotCaughtUp(f"not consumed up to {dict(min_offsets)} within {timeout_s:.1f}s")
        entry = self._find(tenant, run_id, kind, key, scope)
        if entry is not None and self._answerable(entry):
            return Lookup(entry)
        intent = self.open_intent(tenant, run_id, key) if kind is Kind.TOOL else None
        if intent is None and entry is not None and entry.kind is Kind.TOOL:
            intent = _withheld(entry, run_id)
        return Lookup(None, intent)

    def open_intent(self, tenant: str, run_id: str, key: str) -> Intent | None:
        with self._cond:
            shadowed: set[str] = set()
            for (t, r, iid), held in self._pending.intents.items():
                if t != tenant or r != run_id:
                    continue
                if held is None:
                    shadowed.add(iid)
                elif held[0].key == key:
                    return held[0]
        stored = self.store.get_intent(tenant, run_id, key)
        if stored is not None and stored.intent_id in shadowed:
            return None
        return stored

    def run_state(
        self, *, tenant: str, run_id: str, min_offsets: Mapping[int, int], timeout_s: float
    ) -> RunState:
        if not self.caught_up(min_offsets, timeout_s):
            raise NotCaughtUp(f"not consumed up to {dict(min_offsets)} within {timeout_s:.1f}s")
        stored = self.store.run_state(tenant, run_id)
        with self._cond:
            held = self._pending.runs.get((tenant, run_id))
            changes = {
                iid: v
                for (t, r, iid), v in self._pending.intents.items()
                if t == tenant and r == run_id
            }
        intents = {i.intent_id: i for i in stored.open_intents}
        for iid, value in changes.items():
            if value is None:
                intents.pop(iid, None)
            else:
                intents[iid] = value[0]
        last = max(stored.last_sequence, held[0] if held else 0)
        return RunState(tenant, run_id, last, tuple(intents[k] for k in sorted(intents)))


def _covers(erasure: CacheErasure, held: object) -> bool:
    """Whether a pending entry, intent (with its partition) or model node is the erasure's."""
    if held is None:
        return False
    if isinstance(held, tuple):
        held = held[0]
    tenant, run_id = getattr(held, "tenant_id", None), getattr(held, "run_id", None)
    if tenant != erasure.tenant or not isinstance(run_id, str):
        return False
    if run_id in erasure.runs:
        return True
    return erasure.marker is not None and erasure.holds(
        tenant,
        run_id,
        orjson.dumps(held.to_json()),  # type: ignore[attr-defined]
    )


def _withheld(entry: CacheEntry, run_id: str) -> Intent | None:
    """A tool call of ``run_id`` that completed but whose result no longer opens: its outcome
    is unknown to the run again (an idempotent tool runs again with its idempotency key, any
    other raises ``OutcomeUnknown``), never a result of ``[erased]`` and never a silent second
    call. Another run's entry (a tenant-scoped lookup) is a plain miss: that call was not this
    run's."""
    if entry.run_id != run_id:
        return None
    return Intent(
        entry.tenant_id,
        entry.run_id,
        entry.call_id or entry.key,
        entry.key,
        entry.tool_name,
        entry.call_id,
        step=entry.step,
        turn_id=entry.turn_id,
    )
