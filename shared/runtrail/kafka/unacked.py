"""What a producer keeps until the broker acknowledges it, and how it sends a failure again.

Why: a record is only safe once the broker acknowledged it, so every runtrail producer keeps it
until then and produces it again after a failure, in its original order and behind nothing
newer. One rule covers a broker's "too large" (:func:`~runtrail.kafka.producer_config.too_large`):
the broker refuses a whole produce batch over the topic's ``max.message.bytes``, and every
record in it gets the size error, the small ones beside the large one too. A first size error
makes a record a *suspect*, sent again in a batch of its own; only a size error for it alone is
the verdict.

The publisher keeps its records in its write-ahead spool and uses :class:`SizeSuspects` alone;
the output topics and the dead letters keep theirs in an :class:`Unacked` and send failures
again with :func:`resend`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

R = TypeVar("R")


class SizeSuspects:
    """Records refused as too large inside a batch: each is sent again alone before judged."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: set[int] = set()

    def refused(self, rid: int) -> bool:
        """Note a size refusal of ``rid``: True when it is the verdict (it was sent alone),
        False when it only makes ``rid`` a suspect."""
        if rid in self._ids:
            self._ids.remove(rid)
            return True
        self._ids.add(rid)
        return False

    def discard(self, rid: int) -> None:
        self._ids.discard(rid)

    def keep_only(self, rids: Iterable[int]) -> None:
        """Forget every suspect not in ``rids`` (the others were delivered)."""
        self._ids.intersection_update(rids)

    def clear(self) -> None:
        self._ids.clear()

    def __contains__(self, rid: object) -> bool:
        return rid in self._ids

    def __len__(self) -> int:
        return len(self._ids)


class Unacked(Generic[R]):
    """Records sent and not yet acknowledged, by id in send order, and which failed.

    A failed record waits in :attr:`failed` until :func:`resend`; while one waits, a newer
    record must wait behind it (:meth:`add` with ``behind=True``), so none is overtaken.
    """

    __slots__ = ("_failed", "_next_id", "records", "suspects")

    def __init__(self) -> None:
        #: every record not yet acknowledged, by id (ids grow in send order)
        self.records: dict[int, R] = {}
        self._failed: set[int] = set()
        self.suspects = SizeSuspects()
        self._next_id = 0

    def add(self, record: R) -> tuple[int, bool]:
        """Keep ``record``: its id, and whether it may be produced now (False: an earlier
        record waits to be sent again, so this one waits behind it)."""
        rid = self._next_id
        self._next_id = rid + 1
        self.records[rid] = record
        if self._failed:
            self._failed.add(rid)
            return rid, False
        return rid, True

    def acked(self, rid: int) -> None:
        """The broker acknowledged ``rid`` (after :meth:`fail_all` too: its report came)."""
        self.records.pop(rid, None)
        self._failed.discard(rid)
        self.suspects.discard(rid)

    def fail(self, rid: int) -> None:
        """``rid`` was not delivered: it is sent again by the next :func:`resend`."""
        if rid in self.records:
            self._failed.add(rid)

    def fail_all(self) -> None:
        """Every record kept is failed, to be sent again: the client that held them is gone
        without a word on each (a fatal error; a report it was serving then is lost). One
        it delivered just before may so be written twice, as after a restart."""
        self._failed.update(self.records)

    def refused_too_large(self, rid: int) -> bool:
        """The broker refused ``rid`` as too large: True for the verdict (the caller drops or
        replaces it); False when it is only a suspect, to be sent again alone."""
        if self.suspects.refused(rid):
            return True
        self.fail(rid)
        return False

    def drop(self, rid: int) -> R | None:
        """Stop keeping ``rid`` (judged for good); the record, if it was kept."""
        self._failed.discard(rid)
        self.suspects.discard(rid)
        return self.records.pop(rid, None)

    def drained(self) -> None:
        """Nothing is in flight and every report was served: each record not failed is
        acknowledged (a producer with failure reports only gets no other word of it)."""
        failed = self._failed
        self.records = {rid: r for rid, r in self.records.items() if rid in failed}
        self.suspects.keep_only(failed)

    def clear(self) -> None:
        """Every record is acknowledged."""
        self.records.clear()
        self._failed.clear()
        self.suspects.clear()

    def is_failed(self, rid: int) -> bool:
        return rid in self._failed

    @property
    def failed(self) -> int:
        """Records waiting to be sent again."""
        return len(self._failed)

    def take_failed(self) -> list[int]:
        """The failed ids, in send order, no longer marked failed."""
        ids = sorted(self._failed)
        self._failed.clear()
        return ids

    def __len__(self) -> int:
        return len(self.records)


def resend(
    unacked: Unacked[R],
    produce: Callable[[int], None],
    in_flight_after: Callable[[float], int],
    timeout_s: float,
) -> None:
    """Produce the failed records of ``unacked`` again, in order; a suspect in a batch of its
    own. ``produce(rid)`` hands one to the client (marking it failed if it cannot);
    ``in_flight_after(timeout_s)`` waits for the client's queue and says what is left in it.

    Stops at the first record that fails again or that cannot be isolated in time: it and
    everything after it stay failed, in order, for the next call.
    """
    again = unacked.take_failed()
    for position, rid in enumerate(again):
        if rid not in unacked.records:
            continue
        alone = rid in unacked.suspects
        if alone and in_flight_after(timeout_s):  # the suspect gets a batch alone
            _keep_failed(unacked, again[position:])
            return
        produce(rid)
        if alone and not unacked.failed:
            if in_flight_after(timeout_s):  # still in flight: the rest waits
                _keep_failed(unacked, again[position + 1 :])
                return
            if rid in unacked.records and not unacked.is_failed(rid):
                unacked.acked(rid)  # drained with no failure report: delivered
        if unacked.failed:  # failed at once again: keep the rest behind it, in order
            _keep_failed(unacked, again[position + 1 :])
            return


def _keep_failed(unacked: Unacked[R], rids: list[int]) -> None:
    for rid in rids:
        unacked.fail(rid)
