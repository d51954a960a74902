"""Turns assembled nodes into capture records and commit holds. Pure: no I/O.

How events form nodes (seed 000 §1: pairing keys, accumulation, tokens, flush points, gaps)
is :mod:`runtrail.nodes.assembly`, shared with the resume cache. What capture adds:

* a node becomes a :class:`NodeIoRecord` when it closes (MODEL at its STEP_END, TOOL at its
  TOOL_RESULT), or when it has been idle too long (incomplete, reason ``idle``);
* a restarted MODEL node (a second MODEL_REQUEST in the step) is not recorded: its events
  are dropped and counted, never mixed into the new call's record; every event that formed
  no record is counted in :attr:`NodePairer.dropped` by reason;
* commit points and their metadata (:mod:`.holds`) make a restart re-form every node
  exactly; an event waiting for a missing predecessor still holds its offset.

Record times are the events' ``occurredAt``; only idle expiry looks at a clock (injected, or
``now_ms`` passed by the caller), because "idle" is about the consumer's time, not the agent's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

from runtrail.capture.holds import DEFAULT_MAX_METADATA, Hold, PartitionHolds
from runtrail.capture.record import NodeIoRecord, derive_record_id, model_node_id, tool_node_id
from runtrail.capture.times import epoch_ms
from runtrail.events.models import Event
from runtrail.nodes import RunSequencer
from runtrail.nodes.assembly import (
    DUPLICATE,
    LATE,
    NO_OPEN_REQUEST,
    SUPERSEDED_REQUEST,
    Node,
    NodeAssembly,
    NodeListener,
)

__all__ = [
    "DUPLICATE",
    "LATE",
    "NO_OPEN_REQUEST",
    "SUPERSEDED_REQUEST",
    "NodePairer",
    "to_record",
    "wall_ms",
]


def wall_ms() -> int:
    """The default idle clock: wall time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def to_record(node: Node) -> NodeIoRecord:
    """The capture record of a closed node (seed 000 §1.5), built without re-validation:
    every value comes from validated events or from the assembly's own arithmetic."""
    started = epoch_ms(node.started_at)
    captured = epoch_ms(node.last_at)
    if node.node_type == "MODEL":
        node_id = model_node_id(node.run_id, node.turn_id, node.step)
        input_tokens, output_tokens = node.tokens
    else:
        node_id = tool_node_id(node.run_id, node.turn_id, node.step, node.call_key)
        input_tokens = output_tokens = None
    return NodeIoRecord.trusted(
        record_id=derive_record_id(node.tenant_id, node_id, node.event_ids),
        tenant_id=node.tenant_id,
        run_id=node.run_id,
        session_id=node.session_id,
        turn_id=node.turn_id,
        step=node.step,
        node_type=node.node_type,
        node_id=node_id,
        model_id=node.model_id,
        inputs=node.inputs,
        output_text=node.text,
        outputs=node.raw,
        started_at_epoch_ms=started,
        captured_at_epoch_ms=captured,
        duration_ms=max(0, captured - started),
        reasoning_text=node.reasoning,
        retry_count=node.retries,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        source_event_ids=tuple(node.event_ids),
        incomplete=node.incomplete is not None,
        incomplete_reason=node.incomplete,
    )


class _Capture(NodeListener):
    """Keeps the partitions' commit holds in step with the assembly; collects records."""

    __slots__ = ("counts", "holds", "records")

    def __init__(self, holds: dict[int, PartitionHolds], counts: Counter[str]) -> None:
        self.holds = holds
        self.counts = counts
        self.records: list[NodeIoRecord] = []

    def skip(self, event: Event, partition: int, offset: int) -> bool:
        holds = self.holds[partition]
        if holds.marks and offset in holds.marks:
            holds.tail_dropped(offset)  # a straddler's tail: captured already
            return True
        return False

    def opened(self, node: Node) -> None:
        self.holds[node.partition].opened(node.serial, node.first_offset)

    def lowered(self, node: Node) -> None:
        self.opened(node)  # called again, the holds lower the node's first offset

    def superseded(self, old: Node, new: Node) -> None:
        self.counts[SUPERSEDED_REQUEST] += len(old.event_ids)
        self.release(old)

    def closed(self, node: Node) -> None:
        self.release(node)
        self.records.append(to_record(node))

    def dropped(self, reason: str, count: int = 1) -> None:
        self.counts[reason] += count

    def release(self, node: Node) -> None:
        holds = self.holds.get(node.partition)
        if holds is not None:
            skips = tuple(node.offsets) if node.node_type == "TOOL" else (node.offsets[0],)
            holds.closed(node.serial, node.last_offset, skips)


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
        self._nodes = NodeAssembly(RunSequencer(window, wait_ms))
        self._holds: dict[int, PartitionHolds] = {}
        #: events that formed no part of a record, by reason (the service reads and resets it)
        self.dropped: Counter[str] = Counter()
        self._capture = _Capture(self._holds, self.dropped)

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
        capture = self._capture
        records: list[NodeIoRecord] = []
        capture.records = records
        self._nodes.feed(event, partition, offset, now, capture)
        return records

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
            hold = holds.hold(max_metadata, self._nodes.floor(partition))
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
        capture = self._capture
        records: list[NodeIoRecord] = []
        capture.records = records
        self._nodes.expire(now_ms, capture, forget_ms=idle_ms)
        for node in self._nodes.idle(now_ms, idle_ms):
            capture.closed(node)
        return records

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget open nodes of revoked partitions; their new owner re-reads them."""
        gone = set(partitions)
        self._nodes.drop_partitions(gone)
        for partition in gone:
            self._holds.pop(partition, None)

    def open_nodes(self) -> int:
        """How many nodes are open (for metrics)."""
        return self._nodes.open_count()

    def buffered_events(self) -> int:
        """How many events wait for a missing predecessor of their run (for metrics)."""
        return self._nodes.buffered()
