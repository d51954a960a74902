"""What the resumable model client and tool executor share: the delegate, the run's cache and
its recorder, and the (step, turn) a recorded node is filed under."""

from __future__ import annotations

from typing import Generic, TypeVar

from runtrail.resume.cache import ResumeCache
from runtrail.resume.recorder import RunRecorder

D = TypeVar("D")


class CachedDelegate(Generic[D]):
    """Calls ``delegate`` only where ``cache`` has no recorded outcome; ``recorder`` (if any)
    publishes the run's events and is told of the cache, so a resumed life says so before its
    first event."""

    def __init__(self, delegate: D, cache: ResumeCache, recorder: RunRecorder | None) -> None:
        self.delegate = delegate
        self.cache = cache
        self.recorder = recorder
        if recorder is not None:
            recorder.watch(cache)

    def _coordinates(
        self, step: int | None = None, turn: str | None = None
    ) -> tuple[int | None, str | None]:
        """The (step, turn) given, else where the recorder stands."""
        if self.recorder is not None:
            step = step if step is not None else self.recorder.step
            turn = turn if turn is not None else self.recorder.turn_id
        return step, turn
