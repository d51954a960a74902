"""Builds cache entries and intents from the event stream. Pure: no I/O, no clock.

The rules, from seed 000 §1 and §3 and seed 002:

* MODEL: MODEL_REQUEST opens a node keyed ``tenant|run|turn|step``; MODEL_RESPONSE deltas
  accumulate (``message`` concatenated, ``raw`` the latest non-empty payload); MODEL_RETRY
  discards what the failed attempt produced; STEP_END closes the step's nodes, and each that got
  a response becomes an entry keyed by its canonical prompt. A node with no response (the call
  errored) yields nothing. A second, different prompt in the same step closes the first node
  if it was answered (two calls in one step), or replaces it if not (a retry).
* TOOL: TOOL_CALL opens an *intent* keyed ``tenant|run|turn|step|callKey``; its TOOL_RESULT closes
  it and, without ``error``, becomes an entry keyed by the call's tool name and arguments. A
  failed call closes its intent (the outcome is known) but is not cached as completed. A result
  without a call has no key and yields nothing.
* Events are applied in per-run sequence order (:class:`runtrail.nodes.RunSequencer`), not
  arrival order: a swapped delta is put back in place. A gap that does not fill in within the
  window spoils the run's open model nodes and those opening in the step it ran into: they
  yield no entry (a cache entry has no "incomplete" flag, so a partial answer must not be
  served). Redelivered and late events are skipped; all of these are counted in ``dropped``.
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
from runtrail.events.runtime_events import (
    ModelRequest,
    ModelResponse,
    ModelRetry,
    StepEnd,
    ToolCall,
    ToolResult,
)
from runtrail.nodes import Gap, Released, RunSequencer, Stale, non_empty
from runtrail.resume.entry import CacheEntry, Intent, ModelResult
from runtrail.resume.keys import Kind, intent_id, model_key, tool_key

#: Why an applied model node yields no entry / why an event was not applied.
SEQUENCE_GAP = "sequence-gap"

NodeKey = tuple[str, str, str, int | None]  # tenant, run, turn ('' when none), step
IntentKey = tuple[str, str, str]  # tenant, run, intent ID
RunKey = tuple[str, str]
EntryKey = tuple[str, str, Kind, str]


@dataclass
class ModelNode:
    """An open model call: its prompt and what has been answered so far."""

    tenant_id: str
    run_id: str
    turn_id: str | None
    step: int | None
    session_id: str | None
    prompt: Any
    key: str
    partition: int
    message: str | None = None
    raw: Any = None
    responded: bool = False
    #: a gap in the run's sequence touched this node: it must not become an entry
    spoiled: bool = False

    @property
    def node_key(self) -> NodeKey:
        return (self.tenant_id, self.run_id, self.turn_id or "", self.step)

    def reset(self) -> None:
        self.message, self.raw, self.responded = None, None, False

    def entry(self) -> CacheEntry:
        result = ModelResult(message=self.message, raw=self.raw)
        return CacheEntry(
            self.tenant_id,
            self.run_id,
            Kind.MODEL,
            self.key,
            result.to_json(),
            step=self.step,
            turn_id=self.turn_id,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tenantId": self.tenant_id,
            "runId": self.run_id,
            "turnId": self.turn_id,
            "step": self.step,
            "sessionId": self.session_id,
            "prompt": self.prompt,
            "key": self.key,
            "partition": self.partition,
            "message": self.message,
            "raw": self.raw,
            "responded": self.responded,
            "spoiled": self.spoiled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelNode:
        return cls(
            tenant_id=data["tenantId"],
            run_id=data["runId"],
            turn_id=data.get("turnId"),
            step=data.get("step"),
            session_id=data.get("sessionId"),
            prompt=data.get("prompt"),
            key=data["key"],
            partition=int(data["partition"]),
            message=data.get("message"),
            raw=data.get("raw"),
            responded=bool(data.get("responded")),
            spoiled=bool(data.get("spoiled")),
        )


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


class EntryBuilder:
    """Open model nodes and intents of the partitions this service owns; see module docstring."""

    def __init__(
        self,
        window: int = 1000,
        wait_ms: int = 5000,
        anchor: Callable[[str, str], int | None] | None = None,
    ) -> None:
        self.models: dict[NodeKey, ModelNode] = {}
        self.intents: dict[IntentKey, tuple[Intent, int]] = {}
        #: highest sequence applied per run (kept so a batch only writes increases)
        self.sequences: dict[RunKey, int] = {}
        self._order = RunSequencer(window, wait_ms, anchor)
        #: events not applied, or model nodes that yielded no entry, by reason
        self.dropped: Counter[str] = Counter()
        #: runs just past a gap -> the (turn, step) applied first after it (None until known)
        self._suspect: dict[RunKey, tuple[str | None, int | None] | None] = {}

    # --- state from the store -------------------------------------------------------------
    def load(self, models: Iterable[ModelNode], intents: Iterable[tuple[Intent, int]]) -> None:
        for node in models:
            self.models[node.node_key] = node
        for intent, partition in intents:
            self.intents[(intent.tenant_id, intent.run_id, intent.intent_id)] = (intent, partition)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        self.models = {k: n for k, n in self.models.items() if n.partition not in gone}
        self.intents = {k: v for k, v in self.intents.items() if v[1] not in gone}
        self.sequences.clear()
        self._order.drop_partitions(gone)
        self._suspect.clear()

    def floor(self, partition: int) -> int | None:
        """The lowest offset read but not applied (waiting for its run's missing sequence)."""
        return self._order.floor(partition)

    def buffered(self) -> int:
        """Events waiting for a missing earlier sequence of their run."""
        return self._order.buffered()

    def expire(self, now_ms: int, out: WriteBatch, forget_ms: int | None = None) -> None:
        """Give up sequence waits older than the wait time (a quiet partition)."""
        self._apply(self._order.expire(now_ms, forget_ms), out)

    def open_intent(self, tenant: str, run_id: str, key: str) -> Intent | None:
        """The run's open intent for a tool key (linear: only used for a few lookups)."""
        for intent, _ in self.intents.values():
            if intent.tenant_id == tenant and intent.run_id == run_id and intent.key == key:
                return intent
        return None

    # --- events ---------------------------------------------------------------------------
    def feed(
        self, event: Event, partition: int, out: WriteBatch, offset: int = 0, now_ms: int = 0
    ) -> None:
        """Account for one event read at ``offset``; what it lets apply goes into ``out``."""
        if not self._suspect and self._order.in_order(event, partition, now_ms):
            self._apply_event(event, partition, out)
        else:
            self._apply(self._order.feed(event, partition, offset, now_ms), out)

    def _apply(self, outcomes: Iterable[Released | Gap | Stale], out: WriteBatch) -> None:
        for outcome in outcomes:
            if isinstance(outcome, Released):
                spoil = bool(self._suspect) and self._after_gap(outcome.event)
                self._apply_event(outcome.event, outcome.partition, out, spoil)
            elif isinstance(outcome, Gap):
                self._spoil(outcome, out)
            else:
                self.dropped[outcome.reason] += 1

    def _spoil(self, gap: Gap, out: WriteBatch) -> None:
        """Events of a run are missing: its open model nodes cannot be trusted whole."""
        for nk, node in self.models.items():
            if node.tenant_id == gap.tenant_id and node.run_id == gap.run_id:
                node.spoiled = True
                out.models[nk] = node
        self._suspect[(gap.tenant_id, gap.run_id)] = None

    def _after_gap(self, event: Event) -> bool:
        key = (event.tenant_id, event.run_id)
        if key not in self._suspect:
            return False
        where = self._suspect[key]
        here = (event.turn_id, event.step)
        if where is None:
            self._suspect[key] = here
            return True
        if where == here:
            return True
        del self._suspect[key]
        return False

    def _apply_event(
        self, event: Event, partition: int, out: WriteBatch, spoil: bool = False
    ) -> None:
        run: RunKey = (event.tenant_id, event.run_id)
        if event.sequence > self.sequences.get(run, 0):
            self.sequences[run] = event.sequence
            out.runs[run] = (event.sequence, partition)
        data = event.data
        if isinstance(data, ModelRequest):
            self._model_request(event, data, partition, out)
        elif isinstance(data, ModelResponse):
            node = self.models.get(_node_key(event))
            if node is not None:
                if data.message is not None:
                    node.message = (node.message or "") + data.message
                    node.responded = True
                if non_empty(data.raw):
                    node.raw = data.raw
                    node.responded = True
                out.models[node.node_key] = node
        elif isinstance(data, ModelRetry):
            node = self.models.get(_node_key(event))
            if node is not None:
                node.reset()
                out.models[node.node_key] = node
        elif isinstance(data, StepEnd):
            self._step_end(event, out)
        elif isinstance(data, ToolCall):
            self._tool_call(event, data, partition, out)
        elif isinstance(data, ToolResult):
            self._tool_result(event, data, out)
        if spoil:
            node = self.models.get(_node_key(event))
            if node is not None and not node.spoiled:
                node.spoiled = True
                out.models[node.node_key] = node

    def _model_request(
        self, event: Event, data: ModelRequest, partition: int, out: WriteBatch
    ) -> None:
        nk = _node_key(event)
        key = model_key(data.prompt)
        node = self.models.get(nk)
        if node is not None and node.key == key:
            node.reset()  # the same prompt again: a retry of an unanswered or failed call
            out.models[nk] = node
            return
        if node is not None and node.responded:
            self._emit(node, out)  # a second, different call in the same step
        node = ModelNode(
            event.tenant_id,
            event.run_id,
            event.turn_id,
            event.step,
            event.session_id,
            data.prompt,
            key,
            partition,
        )
        self.models[nk] = node
        out.models[nk] = node

    def _step_end(self, event: Event, out: WriteBatch) -> None:
        nk = _node_key(event)
        node = self.models.pop(nk, None)
        if node is None:
            return
        if node.responded:
            self._emit(node, out)
        out.models[nk] = None

    def _emit(self, node: ModelNode, out: WriteBatch) -> None:
        if node.spoiled:
            self.dropped[SEQUENCE_GAP] += 1  # a partial answer is never cached
            return
        out.add_entry(node.entry())

    def _tool_call(self, event: Event, data: ToolCall, partition: int, out: WriteBatch) -> None:
        if data.tool_name is None:
            return  # no name, no key: nothing to cache or reconcile by content
        iid = intent_id(event.turn_id, event.step, data.call_id, data.tool_name)
        intent = Intent(
            event.tenant_id,
            event.run_id,
            iid,
            tool_key(data.tool_name, data.arguments),
            data.tool_name,
            data.call_id,
            data.arguments,
            step=event.step,
            turn_id=event.turn_id,
            session_id=event.session_id,
        )
        ik = (event.tenant_id, event.run_id, iid)
        self.intents[ik] = (intent, partition)
        out.intents[ik] = (intent, partition)

    def _tool_result(self, event: Event, data: ToolResult, out: WriteBatch) -> None:
        iid = intent_id(event.turn_id, event.step, data.call_id, data.tool_name)
        ik = (event.tenant_id, event.run_id, iid)
        held = self.intents.pop(ik, None)
        if held is None:
            return
        intent, _ = held
        out.intents[ik] = None
        if not data.is_failure:
            out.add_entry(
                CacheEntry(
                    intent.tenant_id,
                    intent.run_id,
                    Kind.TOOL,
                    intent.key,
                    data.output,
                    step=intent.step,
                    turn_id=intent.turn_id,
                    call_id=intent.call_id,
                    tool_name=intent.tool_name,
                )
            )


def _node_key(event: Event) -> NodeKey:
    return (event.tenant_id, event.run_id, event.turn_id or "", event.step)
