"""Pairs runtime events into node records, exactly as seed 000 §1 prescribes. Pure: no I/O.

* MODEL nodes: MODEL_REQUEST (input = the prompt), MODEL_RESPONSE, MODEL_REASONING and
  MODEL_RETRY share the key ``runId|turnId|step`` and are flushed at that step's STEP_END.
  ``outputText`` concatenates every response's ``message``; ``outputs`` keeps only the latest
  non-empty ``raw`` (overwrite); reasoning segments are joined with ``"\\n"``; retries are
  counted; token counts are parsed from ``outputs`` at flush. A repeated MODEL_REQUEST in the
  same step (a retry) replaces the input, so live replay uses the prompt that was answered.
* TOOL nodes: TOOL_CALL and TOOL_RESULT share ``runId|turnId|step|callKey`` (callId, else
  toolName, else ``anon``) and are flushed at TOOL_RESULT. Calls under the same key pair with
  results first-in first-out. A result without a call is captured without input.
* Keys are also scoped by tenant, so tenants never mix even if run IDs collide.
* An event whose ``sequence`` is not above the last one its node saw is a redelivery and is
  ignored, so a duplicate delta cannot double ``outputText``.

Record times are the events' ``occurredAt``; only idle expiry looks at a clock (injected, or
``now_ms`` passed by the caller), because "idle" is about the consumer's time, not the agent's.
Commit points and their metadata (:mod:`.holds`) make a restart re-form every node exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from runtrail.capture.holds import DEFAULT_MAX_METADATA, Hold, PartitionHolds
from runtrail.capture.record import (
    NodeIoRecord,
    NodeType,
    call_key,
    derive_record_id,
    model_node_id,
    tool_node_id,
)
from runtrail.capture.times import epoch_ms
from runtrail.capture.tokens import parse_usage
from runtrail.events.envelope import Event
from runtrail.events.runtime_events import (
    ModelReasoning,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
)

ModelKey = tuple[str, str, str | None, int | None]
ToolKey = tuple[str, str, str | None, int | None, str]


def wall_ms() -> int:
    """The default idle clock: wall time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def _non_empty(raw: Any) -> bool:
    if raw is None:
        return False
    if isinstance(raw, str | bytes | list | dict):
        return len(raw) > 0
    return True


class _Node:
    """Mutable accumulation state of one open node."""

    __slots__ = (
        "call_key",
        "event_ids",
        "first_offset",
        "inputs",
        "last_at",
        "last_offset",
        "last_seq",
        "model_id",
        "node_type",
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
        "texts",
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
        self.started_at = event.occurred_at
        self.last_at = event.occurred_at
        self.last_seq = 0
        self.touched_ms = 0
        self.event_ids: list[str] = []
        self.inputs: Any = None
        self.model_id: str | None = None
        self.texts: list[str] = []
        self.raw: Any = None
        self.reasoning: list[str] = []
        self.retries = 0

    def touch(self, event: Event, offset: int, now_ms: int) -> None:
        self.event_ids.append(event.event_id)
        self.last_offset = offset
        self.last_seq = event.sequence
        self.last_at = event.occurred_at
        self.touched_ms = now_ms
        if self.session_id is None:
            self.session_id = event.session_id

    def to_record(self, incomplete: bool = False) -> NodeIoRecord:
        started = epoch_ms(self.started_at)
        captured = epoch_ms(self.last_at)
        if self.node_type == "MODEL":
            node_id = model_node_id(self.run_id, self.turn_id, self.step)
            input_tokens, output_tokens = parse_usage(self.raw)
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
            output_text="".join(self.texts),
            outputs=self.raw,
            started_at_epoch_ms=started,
            captured_at_epoch_ms=captured,
            duration_ms=max(0, captured - started),
            reasoning_text="\n".join(self.reasoning),
            retry_count=self.retries,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            source_event_ids=tuple(self.event_ids),
            incomplete=incomplete,
        )


class NodePairer:
    """Feeds on runtime events (in partition order) and returns node records as they close.

    The consumer runtime drives it:

    1. on assignment, ``resume(partition, committed_offset, committed_metadata)``;
    2. ``feed`` every event of the partition, in order, and write the returned records;
    3. to commit: ``flush`` the sink, then commit each partition in ``holds()`` at its
       ``offset`` *with its* ``metadata``, and every other partition at its position;
    4. periodically ``expire_idle``; on revocation ``drop_partitions``.
    """

    def __init__(self, clock: Callable[[], int] = wall_ms) -> None:
        self._clock = clock
        self._models: dict[ModelKey, _Node] = {}
        self._tools: dict[ToolKey, list[_Node]] = {}
        self._holds: dict[int, PartitionHolds] = {}
        self._serial = 0
        self._handlers: dict[str, Callable[[Event, int, int, int], NodeIoRecord | None]] = {
            "MODEL_REQUEST": self._on_model_event,
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
        Events of other types are ignored (they still advance the partition's position).
        """
        holds = self._holds.get(partition)
        if holds is None:
            holds = self._holds[partition] = PartitionHolds()
        holds.seen(offset)
        handler = self._handlers.get(event.type)
        if handler is None:
            return []
        now = self._clock() if now_ms is None else now_ms
        if holds.marks and offset in holds.marks:
            self._drop_tail(event, partition, offset, now)
            return []
        record = handler(event, partition, offset, now)
        return [] if record is None else [record]

    def _drop_tail(self, event: Event, partition: int, offset: int, now: int) -> None:
        """The end of a node that began before the commit point: it was captured already."""
        node = None
        if event.type not in ("TOOL_CALL", "TOOL_RESULT"):  # a tool tail is its result: skip it
            if event.type != "STEP_END":
                self._on_model_event(event, partition, offset, now)
            key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
            node = self._models.pop(key, None)
        self._holds[partition].tail_dropped(offset, None if node is None else node.serial)

    def _open(self, node_type: NodeType, event: Event, partition: int, offset: int) -> _Node:
        self._serial += 1
        node = _Node(self._serial, node_type, event, partition, offset)
        self._holds[partition].opened(node.serial, offset)
        return node

    def _close(self, node: _Node, offset: int, incomplete: bool = False) -> NodeIoRecord:
        holds = self._holds.get(node.partition)
        if holds is not None:
            holds.closed(node.serial, offset)
        return node.to_record(incomplete)

    def _on_model_event(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        node = self._models.get(key)
        if node is None:
            node = self._models[key] = self._open("MODEL", event, partition, offset)
        elif event.sequence <= node.last_seq:
            return None
        node.touch(event, offset, now)
        kind = event.type
        if kind == "MODEL_RESPONSE":
            response = cast(ModelResponse, event.data)
            if response.message:
                node.texts.append(response.message)
            if _non_empty(response.raw):
                node.raw = response.raw
        elif kind == "MODEL_REASONING":
            node.reasoning.append(cast(ModelReasoning, event.data).text)
        elif kind == "MODEL_RETRY":
            node.retries += 1
        else:  # MODEL_REQUEST
            prompt = cast(ModelRequest, event.data).prompt
            node.inputs = prompt
            model = prompt.get("model") if isinstance(prompt, dict) else None
            node.model_id = model if isinstance(model, str) else None
        return None

    def _on_step_end(
        self, event: Event, partition: int, offset: int, now: int
    ) -> NodeIoRecord | None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        node = self._models.get(key)
        if node is None or event.sequence <= node.last_seq:
            return None
        del self._models[key]
        node.touch(event, offset, now)
        return self._close(node, offset)

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
        queue = self._tools.get(key)
        if queue is None:
            queue = self._tools[key] = []
        elif event.sequence <= queue[-1].last_seq:
            return None
        node = self._open("TOOL", event, partition, offset)
        node.call_key = key[4]
        node.inputs = call.model_dump(by_alias=True)  # the call as published (v2: with type)
        node.touch(event, offset, now)
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
            node = queue[0]
            if event.sequence <= node.last_seq:
                return None
            del queue[0]
            if not queue:
                del self._tools[key]
        else:  # an orphan result: captured without input
            node = self._open("TOOL", event, partition, offset)
            node.call_key = key[4]
        node.raw = result.model_dump(by_alias=True)  # the result as published (v2: ok, failed…)
        node.touch(event, offset, now)
        return self._close(node, offset)

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

        ``offset`` is the first offset of the oldest open node. Partitions holding nothing are
        absent: commit them at the consumed position (with no metadata).
        """
        result: dict[int, Hold] = {}
        for partition, holds in self._holds.items():
            hold = holds.hold(max_metadata)
            if hold is not None:
                result[partition] = hold
        return result

    def held_offsets(self) -> dict[int, int]:
        """Per partition, the lowest offset still held (the ``offset`` of :meth:`holds`)."""
        return {partition: hold.offset for partition, hold in self.holds().items()}

    def expire_idle(self, now_ms: int, idle_ms: int) -> list[NodeIoRecord]:
        """Flush, marked incomplete, every node untouched for more than ``idle_ms``.

        A step that never ends (a crashed agent) must not hold memory or offsets forever.
        The record's capture time is its last event's ``occurredAt``.
        """
        stale = [n for n in self._iter_open() if now_ms - n.touched_ms > idle_ms]
        if not stale:
            return []
        stale.sort(key=lambda n: (n.partition, n.first_offset))
        for node in stale:
            self._forget(node)
        records = []
        for node in stale:
            records.append(self._close(node, node.last_offset, incomplete=True))
        return records

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget open nodes of revoked partitions; their new owner re-reads them."""
        gone = set(partitions)
        for node in [n for n in self._iter_open() if n.partition in gone]:
            self._forget(node)
        for partition in gone:
            self._holds.pop(partition, None)

    def open_nodes(self) -> int:
        """How many nodes are open (for metrics)."""
        return len(self._models) + sum(len(q) for q in self._tools.values())

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
