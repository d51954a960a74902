"""The dead-letter limit: a handler that fails for every event stops its partition, visibly.

One event can never stop a service: an event whose ``process()`` raises is dead-lettered as
``handler-error`` and the others go on (:mod:`.runner`). Without a bound, a bad deploy whose
``process()`` raises for *every* event would dead-letter the whole stream and commit past it;
for the audit service those events would be missing from their chains for good. Like arroyo's
``DlqLimit(max_invalid_ratio, max_consecutive_count)``, counted per partition, this module
bounds that:

- **consecutive**: at most ``max_consecutive`` handler errors in a row on a partition (no event
  the service took in between) are dead-lettered; the next one trips the limit;
- **ratio**: at most ``max_ratio`` times ``ratio_window`` handler errors among the last
  ``ratio_window`` offsets of a partition; one more trips it (catches a handler that fails for
  one event type among others: its failures are not consecutive). The window counts offsets,
  whatever became of the messages, so the events the service took cost no bookkeeping at all;
  until a partition has ``ratio_window`` offsets behind it the missing ones count as
  successes (never a trip on the first few events; the consecutive bound is there for those).

A value of 0 switches a bound off (so does a ratio of 1: the window cannot hold more); with
both off, handler errors are dead-lettered without a bound and nothing is held.

**Which dead letters count.** Only ``handler-error``: the service's own code raised for an event
that passed every check of the runtime. The other reasons are the input's fault and are decided
before or by the service, whatever code is deployed: ``too-large``, ``undecodable``,
``unknown-schema``, ``unknown-event-type``, ``invalid-payload``, ``too-deep``, ``non-finite``
(the codec and limits, :data:`~runtrail.runtime.metrics.DEAD_LETTER_REASONS`),
``sequence-conflict`` (the per-run sequence checker), a ``RecursionError`` in ``process()``
(``too-deep``: the event nests too deep for the handler, a limit of the input) and the reasons
a service dead-letters with itself (audit's ``audit-conflict``, the projector's refusals,
resume-cache's ``too-large``): the service decided, so its ``process()`` worked. A stream full
of such input is bad input, which dead-lettering is for. Those messages neither count nor end a
run of handler errors; an event the service took (``process()`` returned) ends it.

**Where nothing is committed past.** While a partition's latest handled event is a handler error,
its *run* of handler errors (from the first one after the last event the service took) is
not counted in the positions the runtime reports (:meth:`DlqLimiter.cap`): the checkpoint,
and every service that stores positions with its rows (audit, projector, resume-cache), stay at
the run's first event, so no commit ever passes a run that may yet trip the limit. An event
the service takes ends the run, and the positions move past it as before (those failures were
poison events, dead-lettered, like any). When the limit trips, the runner pauses the partition
and stops there: the next start (a fixed deploy) reads the run again from its first event.
Its events are then dead-lettered again if they still fail, and the dead letters sent before
the trip stay in the dead-letter topic although the events are processed after the restart
(at least once: a dead letter of a tripped run is not proof the event is missing from the
outputs). A ratio trip holds at the trailing run too: handler errors before the last event the
service took were dead-lettered as single poison events, as they would be without the limit.

While a run is open the positions stay at its first event even without a trip: a poison
event at the end of a quiet partition holds the commit (and a resume-cache lookup waiting for
it) until the partition's next event the service takes, and a restart meanwhile dead-letters
it again.

Replays are counted once: a batch consumed again after a
:class:`~runtrail.runtime.unavailable.StoreUnavailable` reports offsets already seen, which
change nothing (:meth:`DlqLimiter.failed` and :meth:`DlqLimiter.succeeded` ignore an offset at
or below the last one they counted).

Guarded by ``tests/test_dlq_limit.py`` (this object) and ``tests/test_dlq_limit_kafka.py``
(services over a real broker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtrail.runtime.delivery import Delivered, Partition, RawRecord

if TYPE_CHECKING:
    from runtrail.config import Settings

CONSECUTIVE = "consecutive"
RATIO = "ratio"


@dataclass(frozen=True)
class DlqLimit:
    """The bounds (0 switches one off); see the module doc."""

    max_consecutive: int = 100
    max_ratio: float = 0.5
    ratio_window: int = 1000

    def __post_init__(self) -> None:
        if self.max_consecutive < 0 or self.ratio_window < 0:
            raise ValueError("dead-letter limit: counts cannot be negative")
        if not 0 <= self.max_ratio <= 1:
            raise ValueError("dead-letter limit: max_ratio is between 0 and 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> DlqLimit:
        return cls(
            max_consecutive=settings.dlq_max_consecutive,
            max_ratio=settings.dlq_max_ratio,
            ratio_window=settings.dlq_ratio_window,
        )

    @property
    def enabled(self) -> bool:
        return self.max_consecutive > 0 or self.max_in_window is not None

    @property
    def max_in_window(self) -> int | None:
        """The most handler errors the window may hold (None: no ratio bound)."""
        if self.max_ratio <= 0 or self.ratio_window <= 0 or self.max_ratio >= 1:
            return None
        return int(self.max_ratio * self.ratio_window)


@dataclass(frozen=True)
class Trip:
    """A partition past the limit: which bound, and where its run of handler errors starts."""

    partition: Partition
    bound: str
    #: the first handler error of the run: nothing is committed from here
    first_offset: int
    #: the handler error that tripped it (not dead-lettered)
    offset: int
    #: handler errors counted by the bound that tripped, this one included
    count: int
    limit: int
    #: the ratio window (offsets), for a ratio trip
    window: int = 0

    def describe(self) -> str:
        if self.bound == CONSECUTIVE:
            what = f"{self.count} handler errors in a row (limit {self.limit})"
        else:
            what = (
                f"{self.count} handler errors among its last {self.window} offsets "
                f"(limit {self.limit})"
            )
        return what


@dataclass
class _State:
    """One partition's handler errors."""

    #: the highest offset counted, failure or success (replays are not counted again)
    last: int = -1
    #: the first handler error of the current run; None when the last event counted was taken
    start: int | None = None
    #: handler errors in the current run
    run: int = 0
    #: offsets of the handler errors inside the ratio window, oldest first
    window: deque[int] = field(default_factory=deque)


class DlqLimiter:
    """Counts handler errors per partition against a :class:`DlqLimit` (consume thread only)."""

    def __init__(self, limit: DlqLimit) -> None:
        self.limit = limit
        self._max_in_window = limit.max_in_window
        self._enabled = limit.enabled
        #: only partitions with a run open or a handler error in their window
        self._states: dict[Partition, _State] = {}

    @property
    def counting(self) -> bool:
        """Whether any partition has a handler error to remember (else nothing to do)."""
        return bool(self._states)

    def failed(self, tp: Partition, offset: int) -> Trip | None:
        """A handler error at ``offset``: count it; a :class:`Trip` if it passes a bound (then
        it must not be dead-lettered), else None (dead-letter it)."""
        if not self._enabled:
            return None
        state = self._states.get(tp)
        if state is None:
            state = self._states[tp] = _State()
        elif offset <= state.last:
            return None  # counted before: a batch consumed again
        state.last = offset
        if state.start is None:
            state.start, state.run = offset, 0
        state.run += 1
        limit = self.limit
        if limit.max_consecutive and state.run > limit.max_consecutive:
            return Trip(tp, CONSECUTIVE, state.start, offset, state.run, limit.max_consecutive)
        if self._max_in_window is not None:
            window = state.window
            _slide(window, offset, limit.ratio_window)
            window.append(offset)
            if len(window) > self._max_in_window:
                return Trip(
                    tp,
                    RATIO,
                    state.start,
                    offset,
                    len(window),
                    self._max_in_window,
                    limit.ratio_window,
                )
        return None

    def succeeded(self, tp: Partition, offset: int) -> None:
        """The service took the event at ``offset``: its partition's run of errors ends."""
        state = self._states.get(tp)
        if state is None or offset <= state.last:
            return
        state.last = offset
        state.start, state.run = None, 0
        _slide(state.window, offset, self.limit.ratio_window)
        if not state.window:
            del self._states[tp]

    def succeeded_batch(self, delivered: Sequence[Delivered] | Sequence[RawRecord]) -> None:
        """A whole batch was taken: the run of each partition that had one ends."""
        states = self._states
        if not states:
            return
        highest: dict[Partition, int] = {}
        for d in delivered:
            tp = (d.topic, d.partition)
            if tp in states and d.offset > highest.get(tp, -1):
                highest[tp] = d.offset
        for tp, offset in highest.items():
            self.succeeded(tp, offset)

    def hold(self, tp: Partition) -> int | None:
        """The first offset of the partition's open run of handler errors (None: no run)."""
        state = self._states.get(tp)
        return None if state is None else state.start

    def cap(self, positions: MutableMapping[Partition, int]) -> None:
        """Keep each position at the first event of its partition's open run, if any."""
        for tp, state in self._states.items():
            start = state.start
            if start is not None and positions.get(tp, -1) > start:
                positions[tp] = start

    def forget(self, partitions: Iterable[Partition]) -> None:
        """The partitions were revoked or lost: their next owner starts at the commit."""
        for tp in partitions:
            self._states.pop(tp, None)


def _slide(window: deque[int], offset: int, size: int) -> None:
    """Drop the errors that are no longer among the last ``size`` offsets up to ``offset``."""
    oldest = offset - size
    while window and window[0] <= oldest:
        window.popleft()


__all__ = ["CONSECUTIVE", "RATIO", "DlqLimit", "DlqLimiter", "Trip"]
