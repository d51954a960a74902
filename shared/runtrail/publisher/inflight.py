"""The events handed to librdkafka that have no delivery report yet, found again by their bytes.

Why: one shared delivery callback costs far less than a ``functools.partial`` made for every
event (made at produce, called and freed at report). The shared callback learns which event a
report is about from the message itself: its key (the run ID) picks the run's queue, and its
value (unique per event: it holds the eventId and the sequence) is compared with the queue's
head. Reports of one run come in produce order (one key, one partition), so the head matches;
when it does not (e.g. the topic grew partitions meanwhile), the queue is searched, so a
report is never put on the wrong event.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class InFlight:
    """Index of every event in flight, by run key; callers hold the publisher's lock."""

    __slots__ = ("_by_key", "_count")

    def __init__(self) -> None:
        self._by_key: dict[bytes | None, deque[tuple[int, bytes | None]]] = {}
        self._count = 0

    def add(self, index: int, key: bytes | None, value: bytes | None) -> None:
        """Note event ``index`` (produced with ``key`` and ``value``) as in flight."""
        queue = self._by_key.get(key)
        if queue is None:
            queue = self._by_key[key] = deque()
        queue.append((index, value))
        self._count += 1

    def take(self, msg: Any) -> int | None:
        """The index of the event ``msg`` reports on, no longer in flight; None when it was
        abandoned already (a purge whose reports did not come)."""
        key = msg.key()
        queue = self._by_key.get(key)
        if not queue:
            return None
        value = msg.value()
        index, head = queue[0]
        if head == value:
            queue.popleft()
        else:
            for entry in queue:
                if entry[1] == value:
                    index = entry[0]
                    queue.remove(entry)
                    break
            else:
                return None
        if not queue:
            del self._by_key[key]
        self._count -= 1
        return index

    def clear(self) -> None:
        """Forget every event in flight (their reports, if any come, are ignored)."""
        self._by_key.clear()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0
