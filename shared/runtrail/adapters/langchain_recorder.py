"""The one recorder a LangChain run publishes through: the callback handler and the resumable
wrappers share it, so "did this step publish anything" (STEP_END or not) counts both."""

from __future__ import annotations

from typing import Any

from runtrail.resume.recorder import RunRecorder


class AdapterRecorder(RunRecorder):
    """:class:`RunRecorder` plus what the callback handler needs: any event type, an explicit
    step, a STEP_END that does not wait for the broker, and a count of rejected events."""

    rejected: int = 0
    #: events this process published for the run (a re-run that replayed everything: 0)
    published: int = 0

    def _publish(self, event_type: str, data: dict[str, Any], **kwargs: Any) -> str | None:
        event_id = super()._publish(event_type, data, **kwargs)
        if event_id is not None:
            self.published += 1
        return event_id

    def emit(self, event_type: str, data: dict[str, Any], *, step: int | None = None) -> bool:
        """Publish one event of this run (at ``step``, else the current step); whether the
        publisher took it (a rejection is counted here and in the publisher's metrics)."""
        accepted = self._publish(event_type, data, step=step) is not None
        if not accepted:
            self.rejected += 1
        return accepted

    def end_step(self, reason: str | None, *, wait: bool) -> bool:
        """STEP_END for the current step if it published anything. ``wait``: also wait for the
        broker's acknowledgement (the resumable path); the observing handler never waits."""
        if wait:
            return self.step_end(reason)
        with self._lock:
            published = self._published_in_step > 0
            self._published_in_step = 0
        if published:
            self.emit("STEP_END", {"reason": reason})
            with self._lock:
                self._published_in_step = 0
        return published
