"""``RunRecorder``: the runtime events the resumable decorators publish for one run.

The decorators are the agent's side of the record: on a miss they publish MODEL_REQUEST /
MODEL_RESPONSE and TOOL_CALL / TOOL_RESULT through the agent's :class:`Publisher`, which the
resume-cache service turns into entries. Three rules make a crash safe:

* **Intent before effect** (seed 002): a TOOL_CALL is published *and acknowledged* before the tool
  runs, so a re-run finds the intent of a call that may have taken effect.
* **Replay never re-records**: a hit publishes nothing, and :meth:`step_end` publishes STEP_END
  only for a step that published something, so a resumed run does not duplicate its history.
* **A new life says so**: with a resume cache to :meth:`RunRecorder.watch`, the first event a
  resumed process publishes is preceded by ``run.resumed`` (where the earlier life ended, the
  first step this one runs, the steps before it replayed from the cache), once.
* **Never raise into the agent**: the publisher does not raise; an intent that could not be
  acknowledged in time is logged (it is in the publisher's spool) and the call goes on.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Protocol

from runtrail.resume.resumed import EVENT_TYPE as RESUMED
from runtrail.resume.resumed import resumed_data

if TYPE_CHECKING:
    from runtrail.resume.cache import ResumeCache

log = logging.getLogger(__name__)


class EventPublisher(Protocol):
    """The part of :class:`runtrail.publisher.Publisher` the recorder uses."""

    def publish(
        self,
        event_type: str,
        run_id: str,
        data: Any,
        *,
        session_id: str | None = ...,
        turn_id: str | None = ...,
        step: int | None = ...,
    ) -> str | None: ...

    def flush(self, timeout: float = ...) -> int: ...

    def acked_offsets(self) -> dict[int, int]: ...


class RunRecorder:
    """Publishes one run's runtime events; the agent moves it along with :meth:`begin_step`."""

    def __init__(
        self,
        publisher: EventPublisher,
        run_id: str,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        intent_ack_timeout_s: float = 10.0,
    ) -> None:
        self.publisher = publisher
        self.run_id = run_id
        self.session_id = session_id
        self.turn_id = turn_id
        self.step: int | None = None
        self.intent_ack_timeout_s = intent_ack_timeout_s
        self._published_in_step = 0
        self._lock = threading.Lock()
        self._cache: ResumeCache | None = None
        #: whether this life has published anything yet (run.resumed goes before its first)
        self._opened = False
        self._steps_begun: set[int] = set()

    def watch(self, cache: ResumeCache) -> None:
        """The resume cache whose :meth:`~ResumeCache.resume` tells this recorder that its life
        continues an earlier one (the decorators call this with the cache they share)."""
        with self._lock:
            self._cache = cache

    def begin_step(self, step: int, *, turn_id: str | None = None) -> None:
        with self._lock:
            if not self._opened:
                self._steps_begun.add(step)
            self.step = step
            if turn_id is not None:
                self.turn_id = turn_id
            self._published_in_step = 0

    def acked_offsets(self) -> dict[int, int]:
        """Offsets the broker acknowledged to this process (for read-your-writes lookups)."""
        return self.publisher.acked_offsets()

    def _publish(
        self,
        event_type: str,
        data: dict[str, Any],
        *,
        step: int | None = None,
        turn_id: str | None = None,
        use_current: bool = True,
    ) -> str | None:
        with self._lock:
            self._open_life()
            event_id = self.publisher.publish(
                event_type,
                self.run_id,
                data,
                session_id=self.session_id,
                turn_id=turn_id if turn_id is not None or not use_current else self.turn_id,
                step=step if step is not None or not use_current else self.step,
            )
            if event_id is not None:
                self._published_in_step += 1
            return event_id

    def _open_life(self) -> None:
        """Before this life's first event: ``run.resumed`` if the cache resumed an earlier
        life. Every step begun before this one published nothing: the cache replayed it."""
        if self._opened:
            return
        self._opened = True
        cache = self._cache
        resumed = cache.resumed if cache is not None else None
        if cache is None or resumed is None:
            return
        hits = cache.counters.model_hits + cache.counters.tool_hits
        self.publisher.publish(
            RESUMED,
            self.run_id,
            resumed_data(
                after_sequence=resumed.last_sequence,
                at_step=self.step,
                cached_steps=len(self._steps_begun - {self.step}),
                cache_hits=hits,
            ),
            session_id=self.session_id,
            turn_id=self.turn_id,
            step=self.step,
        )

    # --- model nodes ----------------------------------------------------------------------
    def model_request(self, prompt: Any) -> None:
        self._publish("MODEL_REQUEST", {"prompt": prompt})

    def model_response(self, message: str | None, raw: Any) -> None:
        self._publish("MODEL_RESPONSE", {"message": message, "raw": raw})

    def model_failed(self, attempt: int, reason: str) -> None:
        """The call errored after output was published: MODEL_RETRY makes consumers drop it."""
        self._publish("MODEL_RETRY", {"attempt": attempt, "reason": reason[:500]})

    # --- tool nodes -----------------------------------------------------------------------
    def tool_call(self, call_id: str | None, tool_name: str, arguments: Any) -> bool:
        """Publish the intent and wait for the broker's acknowledgement; whether it came."""
        self._publish(
            "TOOL_CALL", {"callId": call_id, "toolName": tool_name, "arguments": arguments}
        )
        unsettled = self.publisher.flush(self.intent_ack_timeout_s)
        if unsettled:
            log.warning(
                "run %s: the TOOL_CALL of %s (call %s) is not acknowledged after %.1fs; the "
                "tool runs anyway, but a crash now could leave no trace of its intent",
                self.run_id,
                tool_name,
                call_id,
                self.intent_ack_timeout_s,
            )
        return unsettled == 0

    def tool_result(
        self,
        call_id: str | None,
        tool_name: str | None,
        *,
        output: Any = None,
        error: str | None = None,
        step: int | None = None,
        turn_id: str | None = None,
    ) -> None:
        """The outcome; ``step``/``turn_id`` place it beside an intent of an earlier life."""
        self._publish(
            "TOOL_RESULT",
            {"callId": call_id, "toolName": tool_name, "output": output, "error": error},
            step=step,
            turn_id=turn_id,
        )

    # --- steps ----------------------------------------------------------------------------
    def step_end(self, reason: str | None = None, *, flush_timeout_s: float = 10.0) -> bool:
        """Close the step: STEP_END (and wait for acknowledgement) if the step published
        anything; a step replayed wholly from the cache publishes nothing. Whether it did."""
        with self._lock:
            published = self._published_in_step > 0
        if not published:
            return False
        self._publish("STEP_END", {"reason": reason})
        self.publisher.flush(flush_timeout_s)
        with self._lock:
            self._published_in_step = 0
        return True
