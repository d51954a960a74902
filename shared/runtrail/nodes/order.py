"""Per-run sequence order: nodes are assembled from events in ``sequence`` order, not arrival.

A run's events can reach a consumer out of order (a spool drained late, a second producer, a
retried batch). Joining deltas in arrival order would store wrong content, so each consumer
puts them back in order here before pairing them into nodes:

* an event with the run's next sequence is released at once (the fast path: one dict lookup);
* a later one waits in the run's buffer until the missing ones arrive;
* a missing sequence is waited for while fewer than ``window`` further events have been read
  from the run's partition, and at most ``wait_ms`` of consumer time; then it is given up and a
  :class:`Gap` is reported, so the assembler marks the run's open nodes incomplete instead of
  storing them as if they were whole;
* an event whose sequence was already released (a redelivery) or given up (too late) is
  :class:`Stale`: dropped, and reported so it is counted.

Where a run starts is known when its first event is sequence 1, or when the consumer can look
the run's last applied sequence up (``anchor``). Otherwise (a run already under way when the
consumer started) the run waits one window and starts at the lowest sequence it saw.

Buffered events are not processed yet, so their offsets must not be committed:
:meth:`RunSequencer.floor` is the lowest offset still buffered on a partition.

The window counts events of the partition, not wall time, so reprocessing the same offsets
after a restart makes the same decisions; ``wait_ms`` only bounds a quiet partition.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from runtrail.events import Event

RunKey = tuple[str, str]  # tenant, run
#: Given-up ranges remembered per run, to tell a late event from a redelivery.
_MISSING_KEPT = 1024


class Released(NamedTuple):
    """The run's next event in sequence order, with where it was read."""

    event: Event
    partition: int
    offset: int


class Gap(NamedTuple):
    """Sequences ``first..last`` of a run did not arrive within the window."""

    tenant_id: str
    run_id: str
    partition: int
    first: int
    last: int


class Stale(NamedTuple):
    """An event below the run's next sequence: ``duplicate`` (seen) or ``late`` (given up)."""

    event: Event
    partition: int
    offset: int
    reason: str


Outcome = Released | Gap | Stale


class _Run:
    __slots__ = ("deadline", "missing", "next", "partition", "since_ms", "touched_ms", "waiting")

    def __init__(self, partition: int, next_seq: int | None) -> None:
        self.partition = partition
        #: the next sequence to release; None while the start is unknown
        self.next = next_seq
        self.waiting: dict[int, tuple[Event, int]] = {}
        self.deadline = 0  # the partition offset at which the wait is given up
        self.since_ms = 0
        self.touched_ms = 0
        self.missing: list[tuple[int, int]] = []


class RunSequencer:
    """Releases each run's events in sequence order; see the module docstring."""

    def __init__(
        self,
        window: int = 1000,
        wait_ms: int = 5000,
        anchor: Callable[[str, str], int | None] | None = None,
    ) -> None:
        if window < 0:
            raise ValueError(f"reorder window must be >= 0, got {window}")
        self.window = window
        self.wait_ms = wait_ms
        self._anchor = anchor
        self._runs: dict[RunKey, _Run] = {}
        #: per partition, (deadline offset, tiebreak, run key) of runs that wait
        self._deadlines: dict[int, list[tuple[int, int, RunKey]]] = {}
        self._waiting: dict[int, set[RunKey]] = {}
        self._tiebreak = 0

    # --- the hot path --------------------------------------------------------------------
    def feed(self, event: Event, partition: int, offset: int, now_ms: int = 0) -> list[Outcome]:
        """Account for one event read at ``offset``; returns what it releases, in order."""
        key = (event.tenant_id, event.run_id)
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = self._start(key, partition, event.sequence)
        run.touched_ms = now_ms
        seq = event.sequence
        out: list[Outcome]
        if run.next is not None and seq < run.next:
            out = [Stale(event, partition, offset, self._why_stale(run, seq))]
        elif seq in run.waiting:
            out = [Stale(event, partition, offset, "duplicate")]
        elif seq == run.next and not run.waiting:
            run.next = seq + 1
            out = [Released(event, partition, offset)]
        else:
            if not run.waiting:
                run.since_ms = now_ms
                self._waiting.setdefault(partition, set()).add(key)
                self._schedule(key, run, offset + self.window)
            run.waiting[seq] = (event, offset)
            out = []
            self._release(key, run, out)
        deadlines = self._deadlines.get(partition)
        if deadlines and deadlines[0][0] <= offset:
            self._expire_offsets(deadlines, offset, out)
        return out

    def in_order(self, event: Event, partition: int, now_ms: int = 0) -> bool:
        """The fast path: if ``event`` is its run's next and nothing waits on ``partition``,
        release it (it is the only outcome) and return True; else do nothing (call feed)."""
        run = self._runs.get((event.tenant_id, event.run_id))
        if (
            run is None
            or run.next != event.sequence
            or run.waiting
            or self._deadlines.get(partition)
        ):
            return False
        run.next += 1
        run.touched_ms = now_ms
        return True

    def _start(self, key: RunKey, partition: int, seq: int) -> _Run:
        last = self._anchor(*key) if self._anchor is not None else None
        if last is not None:
            return _Run(partition, last + 1)
        return _Run(partition, 1 if seq == 1 else None)

    @staticmethod
    def _why_stale(run: _Run, seq: int) -> str:
        for first, last in run.missing:
            if first <= seq <= last:
                return "late"
        return "duplicate"

    def _schedule(self, key: RunKey, run: _Run, deadline: int) -> None:
        self._tiebreak += 1
        run.deadline = deadline
        heapq.heappush(
            self._deadlines.setdefault(run.partition, []), (deadline, self._tiebreak, key)
        )

    def _release(self, key: RunKey, run: _Run, out: list[Outcome]) -> None:
        waiting = run.waiting
        while run.next in waiting:
            event, offset = waiting.pop(run.next)
            out.append(Released(event, run.partition, offset))
            run.next += 1
        if not waiting:
            held = self._waiting.get(run.partition)
            if held is not None:
                held.discard(key)

    def _give_up(self, key: RunKey, run: _Run, out: list[Outcome], now_ms: int) -> None:
        """Stop waiting for what is missing before the lowest buffered sequence."""
        lowest = min(run.waiting)
        if run.next is not None and lowest > run.next:
            out.append(Gap(key[0], key[1], run.partition, run.next, lowest - 1))
            run.missing.append((run.next, lowest - 1))
            del run.missing[:-_MISSING_KEPT]
        run.next = lowest
        self._release(key, run, out)
        if run.waiting:  # another hole further on: it has waited since its events arrived
            run.since_ms = now_ms
            self._schedule(key, run, min(o for _, o in run.waiting.values()) + self.window)

    def _expire_offsets(
        self, deadlines: list[tuple[int, int, RunKey]], offset: int, out: list[Outcome]
    ) -> None:
        while deadlines and deadlines[0][0] <= offset:
            deadline, _, key = heapq.heappop(deadlines)
            run = self._runs.get(key)
            if run is None or not run.waiting or run.deadline != deadline:
                continue  # filled, rescheduled or forgotten since
            self._give_up(key, run, out, run.since_ms)

    # --- housekeeping ---------------------------------------------------------------------
    def expire(self, now_ms: int, forget_ms: int | None = None) -> list[Outcome]:
        """Give up waits older than ``wait_ms``; forget runs idle longer than ``forget_ms``.

        A quiet partition never reaches a deadline offset, so consumer time bounds the wait.
        Forgetting a run frees its memory; if it speaks again it starts unanchored.
        """
        out: list[Outcome] = []
        for partition in sorted(self._waiting):
            for key in sorted(self._waiting[partition]):
                run = self._runs[key]
                if run.waiting and now_ms - run.since_ms >= self.wait_ms:
                    self._give_up(key, run, out, now_ms)
        if forget_ms is not None:
            idle = [
                k
                for k, r in self._runs.items()
                if not r.waiting and now_ms - r.touched_ms > forget_ms
            ]
            for key in idle:
                del self._runs[key]
        return out

    def missed_before(self, key: RunKey, seq: int) -> bool:
        """Whether sequences below ``seq`` of run ``key`` were given up (a gap)."""
        run = self._runs.get(key)
        return run is not None and any(first < seq for first, _ in run.missing)

    def floor(self, partition: int) -> int | None:
        """The lowest offset buffered on ``partition`` (not processed: do not commit it)."""
        keys = self._waiting.get(partition)
        if not keys:
            return None
        return min(o for key in keys for _, o in self._runs[key].waiting.values())

    def buffered(self) -> int:
        """How many events wait for a missing predecessor (for metrics)."""
        return sum(len(self._runs[k].waiting) for keys in self._waiting.values() for k in keys)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget runs and buffers of revoked partitions; their new owner re-reads them."""
        gone = set(partitions)
        self._runs = {k: r for k, r in self._runs.items() if r.partition not in gone}
        for partition in gone:
            self._deadlines.pop(partition, None)
            self._waiting.pop(partition, None)
