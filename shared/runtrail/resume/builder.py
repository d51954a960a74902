"""Builds cache entries and intents from assembled nodes. Pure: no I/O, no clock.

How events form nodes (seed 000 §1: pairing keys, accumulation, flush points, sequence order
and gaps) is :mod:`runtrail.nodes.assembly`, shared with capture. What the resume cache keeps
of them, from seed 000 §3 and seed 002:

* MODEL: at STEP_END a node whose latest attempt answered (a message or a raw payload since
  the request or the last MODEL_RETRY) becomes an entry keyed by its canonical prompt. A node
  with no answer (the call errored) yields nothing. A second MODEL_REQUEST in the step with a
  different prompt closes the first node if it was answered (two calls in one step); with the
  same prompt it is a retry, and the node starts over.
* TOOL: TOOL_CALL opens an *intent* keyed ``tenant|run|turn|step|callKey``; its TOOL_RESULT
  closes it and, without ``error``, becomes an entry keyed by the call's tool name and
  arguments. A failed call closes its intent (the outcome is known) but is not cached as
  completed. A result without a call, or a call without a tool name, has no key: nothing.
* A gap that does not fill in within the window spoils the run's open model nodes and those
  opening in the step it ran into: they yield no entry (a cache entry has no "incomplete"
  flag, so a partial answer must not be served). Redelivered and late events are skipped;
  all of these are counted in ``dropped``.
* Every applied event advances its run's last sequence, so a resumed run can continue
  numbering, and a re-read after a restart skips what was applied (the store's last sequence
  is the sequencer's anchor). An event waiting for a missing predecessor is not applied, so
  the service must not store an offset past it (:meth:`EntryBuilder.floor`).

Changes accumulate in a :class:`WriteBatch` that the service makes durable in one transaction,
together with the consumed offsets; the open state itself (unanswered model nodes, intents) is
part of the batch, so a restart loads it back instead of re-reading the topic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtrail.events import Event
from runtrail.events.runtime_events import ToolCall
from runtrail.nodes import RunSequencer
from runtrail.nodes.assembly import (
    DUPLICATE,
    LATE,
    SEQUENCE_GAP,
    Node,
    NodeAssembly,
    NodeListener,
)
from runtrail.nodes.keys import call_key
from runtrail.resume.entry import CacheEntry, Intent, ModelResult
from runtrail.resume.keys import Kind, intent_id, model_key, tool_key

__all__ = ["SEQUENCE_GAP", "EntryBuilder", "EntryKey", "ModelNode", "WriteBatch"]

NodeKey = tuple[str, str, str, int | None]  # tenant, run, turn ('' when none), step
IntentKey = tuple[str, str, str]  # tenant, run, intent ID
RunKey = tuple[str, str]
EntryKey = tuple[str, str, Kind, str]


@dataclass(slots=True, eq=False)
class ModelNode:
    """An open model call as the cache keeps it: its prompt's key and its latest answer.

    A view of the assembly's node (so it always shows the node's current state), with the
    persisted form the store writes and loads back.
    """

    node: Node
    key: str

    @property
    def tenant_id(self) -> str:
        return self.node.tenant_id

    @property
    def run_id(self) -> str:
        return self.node.run_id

    @property
    def turn_id(self) -> str | None:
        return self.node.turn_id

    @property
    def step(self) -> int | None:
        return self.node.step

    @property
    def partition(self) -> int:
        return self.node.partition

    @property
    def prompt(self) -> Any:
        return self.node.inputs

    @property
    def node_key(self) -> NodeKey:
        node = self.node
        return (node.tenant_id, node.run_id, node.turn_id or "", node.step)

    @property
    def spoiled(self) -> bool:
        """A gap in the run's sequence touched this node: it must not become an entry."""
        return self.node.incomplete is not None

    def entry(self) -> CacheEntry:
        node = self.node
        result = ModelResult(message=node.answer, raw=node.answer_raw)
        return CacheEntry(
            node.tenant_id,
            node.run_id,
            Kind.MODEL,
            self.key,
            result.to_json(),
            step=node.step,
            turn_id=node.turn_id,
        )

    def to_json(self) -> dict[str, Any]:
        node = self.node
        return {
            "tenantId": node.tenant_id,
            "runId": node.run_id,
            "turnId": node.turn_id,
            "step": node.step,
            "sessionId": node.session_id,
            "prompt": node.inputs,
            "key": self.key,
            "partition": node.partition,
            "message": node.answer,
            "raw": node.answer_raw,
            "responded": node.answered,
            "spoiled": self.spoiled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelNode:
        node = _loaded(
            "MODEL",
            data["tenantId"],
            data["runId"],
            data.get("turnId"),
            data.get("step"),
            int(data["partition"]),
            data.get("sessionId"),
        )
        node.inputs = data.get("prompt")
        message = data.get("message")
        node.text = message or ""
        node.attempt_said = message is not None
        node.raw = data.get("raw")
        node.attempt_raw = node.raw is not None
        if data.get("spoiled"):
            node.incomplete = SEQUENCE_GAP
        view = node.tag = cls(node, data["key"])
        return view


def _loaded(
    node_type: Any,
    tenant_id: str,
    run_id: str,
    turn_id: str | None,
    step: int | None,
    partition: int,
    session_id: str | None,
) -> Node:
    """A node loaded from the store: where its events were read is no longer known (-1)."""
    return Node(0, node_type, tenant_id, run_id, turn_id, step, partition, -1, "", session_id)


@dataclass
class WriteBatch:
    """Everything to make durable at the next flush (later changes to a key replace earlier)."""

    entries: dict[EntryKey, CacheEntry] = field(default_factory=dict)
    #: intent key -> (intent, partition) while open, None once closed
    intents: dict[IntentKey, tuple[Intent, int] | None] = field(default_factory=dict)
    #: node key -> node while open, None once closed
    models: dict[NodeKey, ModelNode | None] = field(default_factory=dict)
    #: run -> (last sequence, partition)
    runs: dict[RunKey, tuple[int, int]] = field(default_factory=dict)
    #: (topic, partition) -> next offset to consume
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def add_entry(self, entry: CacheEntry) -> None:
        self.entries.setdefault((entry.tenant_id, entry.run_id, entry.kind, entry.key), entry)

    def __bool__(self) -> bool:
        return bool(self.entries or self.intents or self.models or self.runs or self.offsets)


def _intent_key(intent: Intent) -> IntentKey:
    return (intent.tenant_id, intent.run_id, intent.intent_id)


class _Batch(NodeListener):
    """Writes what the assembly tells into the batch being built."""

    __slots__ = ("builder", "out")

    def __init__(self, builder: EntryBuilder, out: WriteBatch) -> None:
        self.builder = builder
        self.out = out

    def applied(self, event: Event, partition: int) -> None:
        run: RunKey = (event.tenant_id, event.run_id)
        sequences = self.builder.sequences
        if event.sequence > sequences.get(run, 0):
            sequences[run] = event.sequence
            self.out.runs[run] = (event.sequence, partition)

    def opened(self, node: Node) -> None:
        opened = self.builder.open_content
        if node.node_type == "MODEL":
            prompt = node.inputs if opened is None else opened(node.tenant_id, node.inputs)
            view = node.tag = ModelNode(node, model_key(prompt))
            self.out.models[view.node_key] = view
            return
        call = node.inputs
        if call is None or call.get("toolName") is None:
            return  # an orphan result, or no name: nothing to cache or reconcile by content
        intent = node.tag = Intent(
            node.tenant_id,
            node.run_id,
            intent_id(node.turn_id, node.step, call.get("callId"), call["toolName"]),
            tool_key(
                call["toolName"],
                call.get("arguments")
                if opened is None
                else opened(node.tenant_id, call.get("arguments")),
            ),
            call["toolName"],
            call.get("callId"),
            call.get("arguments"),
            step=node.step,
            turn_id=node.turn_id,
            session_id=node.session_id,
        )
        self.out.intents[_intent_key(intent)] = (intent, node.partition)

    def touched(self, node: Node) -> None:
        if node.node_type == "MODEL":
            view: ModelNode = node.tag
            self.out.models[view.node_key] = view

    def tainted(self, node: Node) -> None:
        self.touched(node)  # a spoiled node is stored spoiled

    def superseded(self, old: Node, new: Node) -> None:
        before: ModelNode = old.tag
        after: ModelNode = new.tag
        if before.key == after.key:  # the same prompt again: a retry, the node starts over
            if old.incomplete is not None and new.incomplete is None:
                new.incomplete = old.incomplete
        elif old.answered:
            self.builder.emit(before, self.out)  # a second, different call in the same step

    def closed(self, node: Node) -> None:
        out = self.out
        if node.node_type == "MODEL":
            view: ModelNode = node.tag
            if node.answered:
                self.builder.emit(view, out)
            out.models[view.node_key] = None
            return
        intent = node.tag
        if not isinstance(intent, Intent):
            return
        # another call under the same key may still be open: the store keeps the latest
        still = [n.tag for n in self.builder.nodes.open_tools(node) if isinstance(n.tag, Intent)]
        out.intents[_intent_key(intent)] = (still[-1], node.partition) if still else None
        result = node.result
        if result is not None and not result.is_failure:
            out.add_entry(
                CacheEntry(
                    intent.tenant_id,
                    intent.run_id,
                    Kind.TOOL,
                    intent.key,
                    result.output,
                    step=intent.step,
                    turn_id=intent.turn_id,
                    call_id=intent.call_id,
                    tool_name=intent.tool_name,
                )
            )

    def dropped(self, reason: str, count: int = 1) -> None:
        if reason in (DUPLICATE, LATE):  # events not applied; the rest is capture's business
            self.builder.dropped[reason] += count


class EntryBuilder:
    """Open model nodes and intents of the partitions this service owns; see module docstring."""

    def __init__(
        self,
        order: RunSequencer | None = None,
        open_content: Callable[[str, Any], Any] | None = None,
    ) -> None:
        """``order`` puts events back in sequence order, as for :class:`NodeAssembly` (the
        service sets its window and anchor). ``open_content(tenant, value)``: the value with
        its protected-content references resolved, so a prompt or arguments published by
        reference get the key an agent's lookup computes from the plaintext (the entries
        themselves keep the references)."""
        self.nodes = NodeAssembly(order)
        self.open_content = open_content
        #: highest sequence applied per run (kept so a batch only writes increases)
        self.sequences: dict[RunKey, int] = {}
        #: events not applied, or model nodes that yielded no entry, by reason
        self.dropped: Counter[str] = Counter()
        self._batch = _Batch(self, WriteBatch())  # one listener, pointed at each call's batch

    # --- state from the store -------------------------------------------------------------
    def load(self, models: Iterable[ModelNode], intents: Iterable[tuple[Intent, int]]) -> None:
        for view in models:
            self.nodes.restore(view.node)
        for intent, partition in intents:
            node = _loaded(
                "TOOL",
                intent.tenant_id,
                intent.run_id,
                intent.turn_id,
                intent.step,
                partition,
                intent.session_id,
            )
            call = ToolCall(
                call_id=intent.call_id, tool_name=intent.tool_name, arguments=intent.arguments
            )
            node.call_key = call_key(intent.call_id, intent.tool_name)
            node.inputs = call.model_dump(by_alias=True)
            node.tag = intent
            self.nodes.restore(node)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        self.nodes.drop_partitions(partitions)
        self.sequences.clear()

    def floor(self, partition: int) -> int | None:
        """The lowest offset read but not applied (waiting for its run's missing sequence)."""
        return self.nodes.floor(partition)

    def buffered(self) -> int:
        """Events waiting for a missing earlier sequence of their run."""
        return self.nodes.buffered()

    def expire(self, now_ms: int, out: WriteBatch, forget_ms: int | None = None) -> None:
        """Give up sequence waits older than the wait time (a quiet partition)."""
        self.nodes.expire(now_ms, self._into(out), forget_ms)

    def open_intent(self, tenant: str, run_id: str, key: str) -> Intent | None:
        """The run's open intent for a tool key (linear: only used for a few lookups)."""
        for node in self.nodes.open_nodes():
            intent = node.tag
            if (
                isinstance(intent, Intent)
                and intent.tenant_id == tenant
                and intent.run_id == run_id
                and intent.key == key
            ):
                return intent
        return None

    # --- events ---------------------------------------------------------------------------
    def feed(
        self, event: Event, partition: int, out: WriteBatch, offset: int = 0, now_ms: int = 0
    ) -> None:
        """Account for one event read at ``offset``; what it lets apply goes into ``out``."""
        self.nodes.feed(event, partition, offset, now_ms, self._into(out))

    def _into(self, out: WriteBatch) -> _Batch:
        self._batch.out = out
        return self._batch

    def emit(self, node: ModelNode, out: WriteBatch) -> None:
        """An answered model node becomes an entry, unless a gap spoiled it."""
        if node.spoiled:
            self.dropped[SEQUENCE_GAP] += 1  # a partial answer is never cached
            return
        out.add_entry(node.entry())
