"""Pairs runtime events into node records as seed 000 §1 and ai4j's listener do. Pure: no I/O.

Events are first put back in per-run sequence order (:class:`runtrail.nodes.RunSequencer`);
the rules below apply in that order, never in arrival order.

* MODEL nodes, key ``runId|turnId|step``: only MODEL_REQUEST opens one (input = the prompt);
  a second MODEL_REQUEST in the same step restarts it, as ai4j does (the superseded call's
  events are dropped and counted, never mixed into the new call's record). MODEL_RESPONSE
  appends its non-empty ``message`` to ``outputText``; ``outputs`` keeps the latest non-empty
  ``raw`` (overwrite); token counts keep the last value seen per slot; MODEL_REASONING
  segments are joined with ``"\\n"`` (empty ones skipped); MODEL_RETRY is counted. A model
  event with no open request in its step (including one after STEP_END) is dropped and
  counted. The node is flushed at its step's STEP_END.
* TOOL nodes, key ``runId|turnId|step|callKey`` (callId, else toolName, else ``anon``): TOOL_CALL
  opens, TOOL_RESULT closes and flushes. A TOOL_CALL identical to the latest pending one (same
  callId, toolName and arguments) is the same call said twice (ai4j's Anthropic stream does
  it) and joins that node. Other calls under one key pair with results first-in first-out. A
  result without a call is captured without input.
* Keys are also scoped by tenant, so tenants never mix even if run IDs collide.
* A sequence gap that does not fill in within the window marks the run's open nodes
  ``incomplete`` (reason ``sequence-gap``); redelivered and too-late events are dropped and
  counted in :attr:`NodePairer.dropped`.

Record times are the events' ``occurredAt``; only idle expiry looks at a clock (injected, or
``now_ms`` passed by the caller), because "idle" is about the consumer's time, not the agent's.
Commit points and their metadata (:mod:`.holds`) make a restart re-form every node exactly;
an event waiting for a missing predecessor still holds its offset.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, cast

from runtrail.capture.holds import DEFAULT_MAX_METADATA, Hold, PartitionHolds
from runtrail.capture.record import (
    NodeIoRecord,
    NodeType,
    derive_record_id,
    model_node_id,
    tool_node_id,
)
from runtrail.capture.times import epoch_ms
from runtrail.events.envelope import Event
from runtrail.events.runtime_events import (
    ModelReasoning,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
)
from runtrail.nodes import (
    Gap,
    Released,
    RunSequencer,
    Stale,
    append_reasoning,
    append_text,
    call_key,
    keep_last,
    non_empty,
    parse_usage,
)
from runtrail.nodes.order import Outcome

ModelKey = tuple[str, str, str | None, int | None]
ToolKey = tuple[str, str, str | None, int | None, str]

#: Why an event formed no part of any record (the labels of the dropped-events counter).
NO_OPEN_REQUEST = "no-open-request"
SUPERSEDED_REQUEST = "superseded-request"
DUPLICATE = "duplicate"
LATE = "late"


_GAP = object()  # a gap was reported; the step it ran into is not known yet


def wall_ms() -> int:
    """The default idle clock: wall time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class _Node:
    """Mutable accumulation state of one open node."""

    __slots__ = (
        "call_key",
        "event_ids",
        "first_offset",
        "incomplete",
        "inputs",
        "last_at",
        "last_offset",
        "model_id",
        "node_type",
        "offsets",
        "partition",
        "raw",
        "reasoning",
        "retries",
        "run_id",
        "serial",
        "session_id",
        "started_at",
        "step",
        "tenant_id",
        "text",
        "tokens",
        "touched_ms",
        "turn_id",
    )

    def __init__(
        self, serial: int, node_type: NodeType, event: Event, partition: int, offset: int
    ) -> None:
        self.serial = serial
        self.node_type: NodeType = node_type
        self.tenant_id = event.tenant_id
        self.run_id = event.run_id
        self.session_id = event.session_id
        self.turn_id = event.turn_id
        self.step = event.step
        self.call_key = ""
        self.partition = partition
        self.first_offset = offset
        self.last_offset = offset
        #: offsets a re-read must skip if a commit point falls inside this node
        self.offsets: list[int] = [offset]
        self.started_at = event.occurred_at
        self.last_at = event.occurred_at
        self.touched_ms = 0
        self.event_ids: list[str] = []
        self.inputs: Any = None
        self.model_id: str | None = None
        self.text = ""
        self.raw: Any = None
        self.reasoning = ""
        self.retries = 0
        self.tokens: tuple[int | None, int | None] = (None, None)
        self.incomplete: str | None = None

    def to_record(self) -> NodeIoRecord:
        started = epoch_ms(self.started_at)
        captured = epoch_ms(self.last_at)
        if self.node_type == "MODEL":
            node_id = model_node_id(self.run_id, self.turn_id, self.step)
            input_tokens, output_tokens = self.tokens
        else:
            node_id = tool_node_id(self.run_id, self.turn_id, self.step, self.call_key)
            input_tokens = output_tokens = None
        return NodeIoRecord(
            record_id=derive_record_id(self.tenant_id, node_id, self.event_ids),
            tenant_id=self.tenant_id,
            run_id=self.run_id,
            session_id=self.session_id,
            turn_id=self.turn_id,
            step=self.step,
            node_type=self.node_type,
            node_id=node_id,
            model_id=self.model_id,
            inputs=self.inputs,
            output_text=self.text,
            outputs=self.raw,
            started_at_epoch_ms=started,
            captured_at_epoch_ms=captured,
            duration_ms=max(0, captured - started),
            reasoning_text=self.reasoning,
            retry_count=self.retries,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            source_event_ids=tuple(self.event_ids),
            incomplete=self.incomplete is not None,
            incomplete_reason=self.incomplete,
        )


class NodePairer:
    """Feeds on runtime events (in partition order) and returns node records as they close.

    The consumer runtime drives it:

    1. on assignment, ``resume(partition, committed_offset, committed_metadata)``;
    2. ``feed`` every event of the partition, in order, and write the returned records;
    3. to commit: ``flush`` the sink, then commit each partition in ``holds()`` at its
       ``offset`` *with its* ``metadata``, and every other partition at its position;
    4. periodically ``expire_idle``; on revocation ``drop_partitions``.

    ``window`` and ``wait_ms`` bound how long a missing sequence is waited for (see
    :mod:`runtrail.nodes.order`).
    """

    def __init__(
        self, clock: Callable[[], int] = wall_ms, window: int = 1000, wait_ms: int = 5000
    ) -> None:
        self._clock = clock
        self._order = RunSequencer(window, wait_ms)
        self._models: dict[ModelKey, _Node] = {}
        self._tools: dict[ToolKey, list[_Node]] = {}
        self._holds: dict[int, PartitionHolds] = {}
        self._serial = 0
        #: events that formed no part of a record, by reason (the service reads and resets it)
        self.dropped: Counter[str] = Counter()
        #: runs just past a gap -> the (turn, step) released first after it (_GAP until known)
        self._suspect: dict[tuple[str, str], object] = {}
        self._tainting = False
        self._handlers: dict[str, Callable[[Event, int, int, int], NodeIoRecord | None]] = {
            "MODEL_REQUEST": self._on_model_request,
            "MODEL_RESPONSE": self._on_model_event,
            "MODEL_REASONING": self._on_model_event,
            "MODEL_RETRY": self._on_model_event,
            "STEP_END": self._on_step_end,
            "TOOL_CALL": self._on_tool_call,
            "TOOL_RESULT": self._on_tool_result,
        }

    # --- the hot path ------------------------------------------------------------------------
    def feed(
        self, event: Event, partition: int, offset: int, now_ms: int | None = None
    ) -> list[NodeIoRecord]:
        """Account for one event; returns the records it completes (usually none or one).

        ``now_ms`` is the idle clock reading; pass one per poll batch to spare a clock call.
        Every event goes through sequence order (all of a run's events carry its sequence);
        events of other types then only advance the partition's position.
        """
        holds = self._holds.get(partition)
        if holds is None:
            holds = self._holds[partition] = PartitionHolds()
        holds.seen(offset)
        now = self._clock() if now_ms is None else now_ms
        if not holds.marks and not self._suspect and self._order.in_order(event, partition, now):
            handler = self._handlers.get(event.type)
            if handler is None:
                return []
            record = handler(event, partition, offset, now)
            return [] if record is None else [record]
        return self._apply(self._order.feed(event, partition, offset, now), now)

    def _apply(self, outcomes: Iterable[Outcome], now: int) -> list[NodeIoRecord]:
        records: list[NodeIoRecord] = []
        for outcome in outcomes:
            if isinstance(outcome, Released):
                event, partition, offset = outcome
                handler = self._handlers.get(event.type)
                if handler is None:
                    continue
                holds = self._holds[partition]
                if holds.marks and offset in holds.marks:
                    holds.tail_dropped(offset)  # a straddler's tail: captured already
                    continue
                if self._suspect:
                    self._tainting = self._after_gap(event)
                record = handler(event, partition, offset, now)
                self._tainting = False
                if record is not None:
                    records.append(record)
            elif isinstance(outcome, Gap):
                self._taint(outcome)
            elif isinstance(outcome, Stale):
                self.dropped[outcome.reason] += 1
        return records

    def _taint(self, gap: Gap) -> None:
        """A run's events are missing: none of its open nodes can be trusted whole.

        Nor can a node that opens in the step the gap ran into: what is missing may be its
        first event (a TOOL_CALL said twice, whose first saying was lost).
        """
        for node in self._iter_open():
            if node.tenant_id == gap.tenant_id and node.run_id == gap.run_id:
                node.incomplete = "sequence-gap"
        self._suspect[(gap.tenant_id, gap.run_id)] = _GAP

    def _after_gap(self, event: Event) -> bool:
        """Whether nodes this event opens are suspect (it is in the step a gap ran into)."""
        key = (event.tenant_id, event.run_id)
        where = self._suspect.get(key)
        if where is None:
            return False
        here = (event.turn_id, event.step)
        if where is _GAP:
            self._suspect[key] = here
            return True
        if where == here:
            return True
        del self._suspect[key]
        return False

    def _open(self, node_type: NodeType, event: Event, partition: int, offset: int) -> _Node:
        self._serial += 1
        node = _Node(self._serial, node_type, event, partition, offset)
        if self._tainting:
            node.incomplete = "sequence-gap"
        self._holds[partition].opened(node.serial, offset)
        return node

    def _touch(self, node: _Node, event: Event, offset: int, now: int) -> None:
        node.event_ids.append(event.event_id)
        if offset < node.first_offset:
            node.first_offset = offset
            self._holds[node.partition].opened(node.serial, offset)
        if offset > node.last_offset:
            node.last_offset = offset
        node.last_at = event.occurred_at
        node.touched_ms = now
        if node.session_id is None:
            node.session_id = event.session_id

    def _close(self, node: _Node) -> NodeIoRecord:
        self._release(node)
        return node.to_record()

    def _release(self, node: _Node) -> None:
        holds = self._holds.get(node.partition)
        if holds is not None:
            skips = tuple(node.offsets) if node.node_type == "TOOL" else (node.offsets[0],)
            holds.closed(node.serial, node.last_offset, skips)

    def _on_model_request(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        old = self._models.get(key)
        if old is not None:  # ai4j restarts the node: the earlier call is not recorded
            self.dropped[SUPERSEDED_REQUEST] += len(old.event_ids)
            self._release(old)
        node = self._models[key] = self._open("MODEL", event, partition, offset)
        if old is not None:
            node.retries = old.retries  # runtrail's SDK re-sends the request after MODEL_RETRY
            # the count comes from the superseded call's events: a re-read must include them
            node.first_offset = min(node.first_offset, old.first_offset)
            self._holds[partition].opened(node.serial, node.first_offset)
        self._touch(node, event, offset, now)
        prompt = cast(ModelRequest, event.data).prompt
        node.inputs = prompt
        model = prompt.get("model") if isinstance(prompt, dict) else None
        node.model_id = model if isinstance(model, str) else None
        return None

    def _on_model_event(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        node = self._models.get(key)
        if node is None:
            self.dropped[NO_OPEN_REQUEST] += 1
            return None
        self._touch(node, event, offset, now)
        kind = event.type
        if kind == "MODEL_RESPONSE":
            response = cast(ModelResponse, event.data)
            node.text = append_text(node.text, response.message)
            if non_empty(response.raw):
                node.raw = response.raw
                node.tokens = keep_last(node.tokens, parse_usage(response.raw))
        elif kind == "MODEL_REASONING":
            node.reasoning = append_reasoning(node.reasoning, cast(ModelReasoning, event.data).text)
        else:  # MODEL_RETRY
            node.retries += 1
        return None

    def _on_step_end(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        node = self._models.pop(key, None)
        if node is None:
            return None
        self._touch(node, event, offset, now)
        return self._close(node)

    def _on_tool_call(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        call = cast(ToolCall, event.data)
        key: ToolKey = (
            event.tenant_id,
            event.run_id,
            event.turn_id,
            event.step,
            call_key(call.call_id, call.tool_name),
        )
        inputs = call.model_dump(by_alias=True)  # the call as published (v2: with its type)
        queue = self._tools.get(key)
        if queue is None:
            queue = self._tools[key] = []
        elif call.call_id is not None and queue[-1].inputs == inputs:
            node = queue[-1]  # the same call said twice: one node
            node.offsets.append(offset)
            self._touch(node, event, offset, now)
            return None
        node = self._open("TOOL", event, partition, offset)
        node.call_key = key[4]
        node.inputs = inputs
        self._touch(node, event, offset, now)
        queue.append(node)
        return None

    def _on_tool_result(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        result = cast(ToolResult, event.data)
        key: ToolKey = (
            event.tenant_id,
            event.run_id,
            event.turn_id,
            event.step,
            call_key(result.call_id, result.tool_name),
        )
        queue = self._tools.get(key)
        if queue:
            node = queue.pop(0)
            if not queue:
                del self._tools[key]
            node.offsets.append(offset)
        else:  # an orphan result: captured without input
            node = self._open("TOOL", event, partition, offset)
            node.call_key = key[4]
            if self._order.missed_before((event.tenant_id, event.run_id), event.sequence):
                node.incomplete = "sequence-gap"  # its call may be what went missing
        node.raw = result.model_dump(by_alias=True)  # the result as published (v2: ok, failed…)
        self._touch(node, event, offset, now)
        return self._close(node)

    # --- housekeeping ---------------------------------------------------------------------------
    def resume(self, partition: int, offset: int, metadata: str | None = None) -> None:
        """Start (or restart) a partition at its committed offset and commit metadata.

        Forgets whatever was open on the partition. Call it before feeding the partition's
        first event; without the metadata of the commit, nodes that straddled the commit
        point would be captured a second time, truncated.
        """
        self.drop_partitions([partition])
        self._holds[partition] = PartitionHolds(Hold(offset, metadata or ""))

    def holds(self, max_metadata: int = DEFAULT_MAX_METADATA) -> dict[int, Hold]:
        """Per partition, the commit point: re-read from ``offset``, honouring ``metadata``.

        ``offset`` is the lowest offset of the oldest open node or of an event still waiting
        for a missing predecessor. Partitions holding nothing are absent: commit them at the
        consumed position (with no metadata).
        """
        result: dict[int, Hold] = {}
        for partition, holds in self._holds.items():
            hold = holds.hold(max_metadata, self._order.floor(partition))
            if hold is not None:
                result[partition] = hold
        return result

    def held_offsets(self) -> dict[int, int]:
        """Per partition, the lowest offset still held (the ``offset`` of :meth:`holds`)."""
        return {partition: hold.offset for partition, hold in self.holds().items()}

    def expire_idle(self, now_ms: int, idle_ms: int) -> list[NodeIoRecord]:
        """Give up sequence waits past their time, then flush idle nodes as incomplete.

        A step that never ends (a crashed agent) must not hold memory or offsets forever:
        every node untouched for more than ``idle_ms`` is flushed, marked incomplete
        (reason ``idle``, unless a gap already marked it). The record's capture time is its
        last event's ``occurredAt``. Runs idle that long are forgotten by the sequencer.
        """
        records = self._apply(self._order.expire(now_ms, forget_ms=idle_ms), now_ms)
        stale = [n for n in self._iter_open() if now_ms - n.touched_ms > idle_ms]
        if not stale:
            return records
        stale.sort(key=lambda n: (n.partition, n.first_offset))
        for node in stale:
            self._forget(node)
        for node in stale:
            if node.incomplete is None:
                node.incomplete = "idle"
            records.append(self._close(node))
        return records

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget open nodes of revoked partitions; their new owner re-reads them."""
        gone = set(partitions)
        for node in [n for n in self._iter_open() if n.partition in gone]:
            self._forget(node)
        for partition in gone:
            self._holds.pop(partition, None)
        self._order.drop_partitions(gone)
        self._suspect.clear()

    def open_nodes(self) -> int:
        """How many nodes are open (for metrics)."""
        return len(self._models) + sum(len(q) for q in self._tools.values())

    def buffered_events(self) -> int:
        """How many events wait for a missing predecessor of their run (for metrics)."""
        return self._order.buffered()

    def _iter_open(self) -> list[_Node]:
        nodes = list(self._models.values())
        for queue in self._tools.values():
            nodes.extend(queue)
        return nodes

    def _forget(self, node: _Node) -> None:
        if node.node_type == "MODEL":
            key: ModelKey = (node.tenant_id, node.run_id, node.turn_id, node.step)
            if self._models.get(key) is node:
                del self._models[key]
            return
        tkey: ToolKey = (node.tenant_id, node.run_id, node.turn_id, node.step, node.call_key)
        queue = self._tools.get(tkey)
        if queue is not None and node in queue:
            queue.remove(node)
            if not queue:
                del self._tools[tkey]
