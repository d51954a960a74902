"""OpenAI Agents SDK → runtrail: a tracing processor that publishes every run to the topic.

Adoption is one line, ``runtrail.adapters.openai_agents.install(publisher)``: it registers a
:class:`RuntrailTracingProcessor` with the SDK's ``add_trace_processor``, so every
``Runner.run`` of the process becomes a runtrail run (the mapping is
:mod:`runtrail.adapters.openai_agents_map`, documented in docs/ADAPTERS.md).

The SDK calls processors synchronously, on the agent's own thread or event loop. So the
callbacks only put the span on a bounded queue (no lock held by anyone else, no I/O); one
worker thread maps and publishes. The agent is never slowed by runtrail and never sees an
exception from it: a full queue drops the span, and every drop is counted, by reason, in
``dropped`` / ``drops`` and in ``runtrail_openai_agents_dropped_total`` (the telemetry the
SDK's own batch processor loses under load without saying so). A model call the SDK did not
trace (a custom ``Model`` that opens no span) is counted there too, as ``model_untraced``, its
tokens in ``untraced_tokens``. Behind the queue the
:class:`~runtrail.publisher.Publisher`'s rules hold: redaction, validation, and a local spool
while the broker is down.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agents.tracing import Span, Trace, TracingProcessor, add_trace_processor

from runtrail.adapters.event_sink import EventSink
from runtrail.adapters.openai_agents_map import (
    MAX_OPEN_TRACES,
    MODEL_UNTRACED,
    Emit,
    TraceMapper,
    publish_emits,
)
from runtrail.extras import require

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 10_000
#: Span starts the mapping needs (turn numbers, agent names); the rest are not queued.
_STARTS = frozenset({"turn", "agent"})
_STOP = object()
_BATCH = 1000
#: What each drop reason means, said once in the log when the reason first occurs.
_REASONS = {
    "queue_full": "the agent outran the worker",
    "rejected": "the publisher refused the event (see its rejected counter)",
    "error": "a span that could not be mapped",
    "evicted": "an open trace forgotten past max_open_traces",
    "closed": "spans after shutdown",
    MODEL_UNTRACED: "a model call that opened no generation or response span, so its input "
    "and output are not in the trace (a custom Model: open agents.tracing.generation_span "
    "in it to record its calls); its turn's tokens are in untraced_tokens",
}


class RuntrailTracingProcessor(TracingProcessor):
    """Publishes the SDK's traces as runtrail events from a worker thread; see the module doc.

    ``registry``: where the drop counter and queue gauge are registered (none when None: the
    counts stay in ``drops`` and ``published``; pass ``prometheus_client.REGISTRY`` to expose
    them on the process's /metrics, which needs prometheus-client, the ``services`` extra).
    ``tenant_id``: stamped on every event (default: the publisher's tenant). ``max_queue``:
    spans held for the worker before new ones are dropped. ``gather_s``: how long the worker
    lets spans gather after waking (fewer wake-ups, less GIL traffic for the agent).
    """

    def __init__(
        self,
        publisher: EventSink,
        *,
        tenant_id: str | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        registry: CollectorRegistry | None = None,
        policy_version: str = "openai-agents",
        gather_s: float = 0.05,
        max_open_traces: int = MAX_OPEN_TRACES,
    ) -> None:
        self._publisher = publisher
        self._tenant = tenant_id
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, max_queue))
        self._mapper = TraceMapper(policy_version, max_open_traces)
        self._lock = threading.Lock()  # guards the counts only
        self.drops: dict[str, int] = {}
        self._untraced_tokens: dict[str, int] = {}
        self.published = 0
        self.handled = 0  # queued items the worker took (mapped, or dropped as errors)
        self._exported = None if registry is None else _Exported(registry, self._queue.qsize)
        self._closed = False
        self._gather_s = gather_s
        self._worker = threading.Thread(
            target=self._run, name="runtrail-openai-agents", daemon=True
        )
        self._worker.start()

    @property
    def dropped(self) -> int:
        """How many spans, events or model calls were not published, all reasons together."""
        with self._lock:
            return sum(self.drops.values())

    @property
    def untraced_tokens(self) -> dict[str, int]:
        """Tokens of the model calls counted as ``model_untraced`` (from their Turn spans:
        ``input_tokens``, ``output_tokens``, ``cached_input_tokens``, …)."""
        with self._lock:
            return dict(self._untraced_tokens)

    # --- the SDK's callbacks: O(1), never raise -------------------------------------------
    def on_trace_start(self, trace: Trace) -> None:
        self._offer(("trace_start", trace))

    def on_trace_end(self, trace: Trace) -> None:
        self._offer(("trace_end", trace))

    def on_span_start(self, span: Span[Any]) -> None:
        try:
            wanted = span.span_data.type in _STARTS
        except Exception:
            wanted = False
        if wanted:
            self._offer(("span_start", span))

    def on_span_end(self, span: Span[Any]) -> None:
        self._offer(("span_end", span))

    def force_flush(self, timeout: float = 30.0) -> None:
        """Wait until the worker has published everything queued, then flush the publisher."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)
        try:
            self._publisher.flush(max(0.0, deadline - time.monotonic()))
        except Exception:
            log.exception("publisher flush failed")

    def shutdown(self, timeout: float = 30.0) -> None:
        """Publish what is queued, stop the worker; the publisher stays the caller's."""
        if self._closed:
            return
        self.force_flush(timeout)
        self._closed = True
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=1.0)
        self._worker.join(timeout=5.0)

    # --- the worker ---------------------------------------------------------------------
    def _offer(self, item: tuple[str, Any]) -> None:
        if self._closed:
            self._drop("closed")
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._drop("queue_full")
        except Exception:
            self._drop("error")

    def _drop(self, reason: str, count: int = 1) -> None:
        with self._lock:
            first = reason not in self.drops
            self.drops[reason] = self.drops.get(reason, 0) + count
        if self._exported is not None:
            self._exported.dropped.labels(reason=reason).inc(count)
        if first:
            log.warning("OpenAI Agents processor dropped %d item(s): %s: %s (counted)", count,
                        reason, _REASONS.get(reason, reason))  # fmt: skip

    def _run(self) -> None:
        """Wake on the first queued item, let more gather, then take them all in one go:
        every wake-up costs the agent's thread a GIL hand-over, so fewer is cheaper."""
        while True:
            batch = [self._queue.get()]
            if self._queue.qsize() < _BATCH:  # no backlog: wait for company
                time.sleep(self._gather_s)
            with contextlib.suppress(queue.Empty):
                while len(batch) < _BATCH:
                    batch.append(self._queue.get_nowait())
            self.handled += sum(1 for item in batch if item is not _STOP)
            for item in batch:
                try:
                    if item is _STOP:
                        return
                    self._handle(*item)
                except Exception:
                    log.exception("cannot map an OpenAI Agents %s", item[0])
                    self._drop("error")
                finally:
                    self._queue.task_done()

    def _handle(self, kind: str, obj: Any) -> None:
        mapper = self._mapper
        try:
            self._map_and_publish(kind, obj)
        finally:
            tokens = mapper.take_untraced_usage()
            if tokens:
                with self._lock:
                    for name, count in tokens.items():
                        self._untraced_tokens[name] = self._untraced_tokens.get(name, 0) + count
            for reason, count in mapper.take_dropped().items():
                self._drop(reason, count)

    def _map_and_publish(self, kind: str, obj: Any) -> None:
        mapper = self._mapper
        if kind == "trace_start":
            trace_id, emits = obj.trace_id, mapper.trace_started(obj)
        elif kind == "span_start":
            trace_id, emits = obj.trace_id, mapper.span_started(obj)
        elif kind == "span_end":
            trace_id, emits = obj.trace_id, mapper.span_ended(obj)
        else:
            trace_id = obj.trace_id
            who = mapper.identity(trace_id)
            emits = mapper.trace_ended(obj)
            self._publish(who, emits)
            return
        self._publish(mapper.identity(trace_id), emits)

    def _publish(self, who: Any, emits: list[Emit]) -> None:
        if who is None or not emits:
            return
        refused = publish_emits(
            self._publisher, who, emits, tenant_id=self._tenant, default_agent="openai-agents"
        )
        if refused:
            self._drop("rejected", refused)
        sent = len(emits) - refused
        with self._lock:
            self.published += sent
        if self._exported is not None:
            self._exported.published.inc(sent)


class _Exported:
    """The processor's metrics on a Prometheus registry."""

    def __init__(self, registry: CollectorRegistry, depth: Callable[[], float]) -> None:
        prometheus = require("prometheus_client", "OpenAI Agents processor metrics")
        self.dropped = prometheus.Counter(
            "runtrail_openai_agents_dropped_total",
            "Spans or events the OpenAI Agents processor did not publish, by reason "
            "(queue_full: the agent outran the worker; rejected: the publisher refused the "
            "event, see its rejected counter; error: the span could not be mapped; evicted: "
            "an open trace forgotten past max_open_traces; closed: after shutdown; "
            "model_untraced: a model call that opened no span, its content not in the trace)",
            ["reason"],
            registry=registry,
        )
        self.published = prometheus.Counter(
            "runtrail_openai_agents_events_total",
            "Events the OpenAI Agents processor handed to the publisher",
            registry=registry,
        )
        prometheus.Gauge(
            "runtrail_openai_agents_queue_depth",
            "Spans waiting for the processor's worker thread",
            registry=registry,
        ).set_function(depth)


def install(
    publisher: EventSink,
    *,
    tenant_id: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    registry: CollectorRegistry | None = None,
) -> RuntrailTracingProcessor:
    """Register a processor that publishes every run of this process; returns it (call its
    ``shutdown()`` before closing the publisher, or let the SDK's exit hook do it)."""
    processor = RuntrailTracingProcessor(
        publisher, tenant_id=tenant_id, max_queue=max_queue, registry=registry
    )
    add_trace_processor(processor)
    return processor
