"""LiteLLM → runtrail: a ``CustomLogger`` that publishes every call as seed-000 events.

Adoption is one line, ``litellm.callbacks = [RuntrailLogger(publisher)]``: every
``completion``/``acompletion`` of the process (streamed or not) becomes events of a runtrail
run; the mapping is :mod:`runtrail.adapters.litellm_map` (documented in docs/ADAPTERS.md).

LiteLLM reports a call when it is over: the sync success hook on a thread of its logging
executor, the failure hook on the caller's thread, the async hooks on the event loop; a stream
is reported once, with the completion it assembled. So two calls of one run can be reported out
of order (a fast failure before the success before it). The logger notes each call when it
starts (``log_pre_api_call``, on the caller's thread, in call order) and publishes a run's calls
in that order: a call reported early waits for the ones started before it, at most
``order_wait_s``. The hooks never raise into LiteLLM and never wait: what cannot be published is
counted, by reason, in ``drops`` (the first of each reason is logged). Behind them the
:class:`~runtrail.publisher.Publisher`'s rules hold: redaction, validation, a local spool while
the broker is down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtrail.adapters.event_sink import EventSink
from runtrail.adapters.litellm_map import (
    MAX_OPEN_RUNS,
    Call,
    CallMapper,
    call_id_of,
    call_of,
    run_id_of,
)
from runtrail.adapters.openai_agents_map import Emit, Identity, publish_emits
from runtrail.extras import explain

try:
    from litellm.integrations.custom_logger import CustomLogger
except ModuleNotFoundError as exc:  # the extra is missing: say which one
    raise (explain(exc, "runtrail.adapters.litellm") or exc) from exc

log = logging.getLogger(__name__)

#: Call IDs remembered as reported (a second report of one call is not published twice).
_REMEMBERED = 10_000
_POLL_S = 0.005


@dataclass
class _Line:
    """One run's calls in the order they started, and those already reported."""

    started: dict[str, float] = field(default_factory=dict)  # call ID -> monotonic start
    reported: dict[str, Call] = field(default_factory=dict)


class RuntrailLogger(CustomLogger):
    """Publishes LiteLLM calls as runtrail events; see the module doc.

    ``tenant_id``: stamped on every event (default: the publisher's tenant). ``order_wait_s``:
    how long a reported call waits for an earlier call of its run that LiteLLM has not reported
    (then it goes ahead, and the silent call is counted as ``no_outcome``).
    """

    def __init__(
        self,
        publisher: EventSink,
        *,
        tenant_id: str | None = None,
        policy_version: str = "litellm",
        order_wait_s: float = 30.0,
        max_open_runs: int = MAX_OPEN_RUNS,
    ) -> None:
        super().__init__()
        self._publisher = publisher
        self._tenant = tenant_id
        self._order_wait_s = order_wait_s
        self._mapper = CallMapper(policy_version, max_open_runs)
        self._lock = threading.Lock()  # the lines, the mapper, publishing: one run's order
        self._counting = threading.Lock()  # the drop counts (taken with or without _lock)
        self._lines: dict[str, _Line] = {}
        self._reported: dict[str, None] = {}
        self.drops: dict[str, int] = {}
        #: events handed to the publisher; calls published
        self.published = 0
        self.calls = 0

    @property
    def dropped(self) -> int:
        """How many calls or events were not published, all reasons together."""
        with self._counting:
            return sum(self.drops.values())

    # --- LiteLLM's hooks: never raise, never wait ------------------------------------------
    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        try:
            self._started(kwargs)
        except Exception:
            self._drop("error", exc_info=True)

    def log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._report(kwargs, response_obj, None)

    def log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._report(kwargs, response_obj, _exception(kwargs))

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._report(kwargs, response_obj, None)

    async def async_log_failure_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        self._report(kwargs, response_obj, _exception(kwargs))

    # --- the caller's side ------------------------------------------------------------------
    def end_run(self, run_id: str, error: str | None = None, timeout: float = 30.0) -> bool:
        """End a run named by ``metadata={"runtrail_run_id": ...}``: wait (up to ``timeout``)
        for its calls to be reported, publish them, then ``run.succeeded`` or ``run.failed``
        (``error``, else a last call that failed). Whether the run was open. A call without a
        named run is a whole run already."""
        self._wait(lambda: run_id not in self._lines, timeout)
        with self._lock:
            line = self._lines.get(run_id)
            if line is not None:
                self._release(run_id, line, force=True)
            ended = self._mapper.end_run(run_id, error)
            if ended is not None:
                self._publish(*ended)
        return ended is not None

    def flush(self, timeout: float = 30.0) -> int:
        """Wait (up to ``timeout``) until every started call is reported and published, then
        flush the publisher; how many events it still holds (0: all acknowledged)."""
        deadline = time.monotonic() + timeout
        self._wait(lambda: not self._lines, timeout)
        with self._lock:
            for run_id, line in list(self._lines.items()):
                self._release(run_id, line, force=True)
        try:
            return self._publisher.flush(max(0.0, deadline - time.monotonic()))
        except Exception:
            log.exception("publisher flush failed")
            return -1

    # --- ordering ---------------------------------------------------------------------------
    def _started(self, kwargs: Mapping[str, Any]) -> None:
        call_id, run_id = call_id_of(kwargs), run_id_of(kwargs)
        if not call_id or not run_id:
            return
        with self._lock:
            if call_id not in self._reported:  # (LiteLLM's retries start the same call again)
                line = self._lines.setdefault(run_id, _Line())
                line.started.setdefault(call_id, time.monotonic())

    def _report(self, kwargs: Any, response_obj: Any, error: BaseException | None) -> None:
        try:
            call = call_of(kwargs, response_obj, error)
            with self._lock:
                if call.call_id in self._reported:
                    return  # reported twice (sync and async hooks): published once
                self._reported[call.call_id] = None
                if len(self._reported) > _REMEMBERED:
                    del self._reported[next(iter(self._reported))]
                line = self._lines.setdefault(call.who.run_id, _Line())
                line.started.setdefault(call.call_id, time.monotonic())
                line.reported[call.call_id] = call
                self._release(call.who.run_id, line)
        except Exception:
            self._drop("error", exc_info=True)

    def _release(self, run_id: str, line: _Line, *, force: bool = False) -> None:
        """Publish the line's reported calls in start order; a call never reported holds the
        ones after it for ``order_wait_s`` (or until ``force``), then is given up."""
        now = time.monotonic()
        try:
            while line.started:
                head, since = next(iter(line.started.items()))
                if head in line.reported:
                    del line.started[head]
                    self._publish_call(line.reported.pop(head))
                elif force or (line.reported and now - since > self._order_wait_s):
                    del line.started[head]
                    self._drop("no_outcome")
                else:
                    break
        finally:
            # also after a publish that raised: an empty line kept would hold `flush` to its
            # timeout and stay in memory for good
            if not line.started:
                self._lines.pop(run_id, None)

    # --- publishing (under the lock) ---------------------------------------------------------
    def _publish_call(self, call: Call) -> None:
        evicted = self._mapper.evicted
        try:
            who, emits = self._mapper.record(call)
        except Exception:
            self._drop("error", exc_info=True)
            return
        finally:
            if self._mapper.evicted > evicted:
                self._drop("evicted", self._mapper.evicted - evicted)
        self.calls += 1
        self._publish(who, emits)

    def _publish(self, who: Identity, emits: list[Emit]) -> None:
        refused = publish_emits(
            self._publisher, who, emits, tenant_id=self._tenant, default_agent="litellm"
        )
        if refused:
            self._drop("rejected", refused)
        self.published += len(emits) - refused

    def _drop(self, reason: str, count: int = 1, *, exc_info: bool = False) -> None:
        with self._counting:
            first = reason not in self.drops
            self.drops[reason] = self.drops.get(reason, 0) + count
        if first:
            log.warning("LiteLLM logger dropped %d item(s): %s (counted)", count, reason,
                        exc_info=exc_info)  # fmt: skip

    def _wait(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if done():
                    return
            time.sleep(_POLL_S)


def _exception(kwargs: Mapping[str, Any]) -> BaseException:
    """The exception of a failed call (LiteLLM passes it in ``kwargs["exception"]``)."""
    error = kwargs.get("exception") if isinstance(kwargs, Mapping) else None
    return error if isinstance(error, BaseException) else RuntimeError(str(error or "failed"))
