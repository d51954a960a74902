"""Seed 000 §1 node assembly, written once: runtime events in, MODEL and TOOL nodes out. Pure.

Capture (:mod:`runtrail.capture.pairer`) and the resume cache (:mod:`runtrail.resume.builder`)
both consume it; what they keep of a node (a record, a cache entry) is theirs, how a node forms
is here:

* Events are put back in per-run sequence order first (:class:`RunSequencer`); the rules
  below apply in that order, never in arrival order.
* MODEL nodes, key ``tenant|runId|turnId|step``: only MODEL_REQUEST opens one (input = the
  prompt); a second MODEL_REQUEST in the same step restarts it, as ai4j does (the new node
  keeps the retry count and the span of the superseded one). MODEL_RESPONSE appends its
  non-empty ``message`` to ``text``; ``raw`` keeps the latest non-empty payload (overwrite);
  token counts keep the last value seen per slot; MODEL_REASONING segments are joined with
  ``"\\n"``; MODEL_RETRY is counted and starts a new *attempt* (what the resume cache serves
  is the latest attempt's answer, :attr:`Node.answer`). A model event with no open request in
  its step is dropped (``no-open-request``). The node closes at its step's STEP_END.
* TOOL nodes, key ``tenant|runId|turnId|step|callKey`` (:func:`call_key`): TOOL_CALL opens,
  TOOL_RESULT closes. A TOOL_CALL identical to the latest pending one (same callId, toolName
  and arguments) is the same call said twice (ai4j's Anthropic stream does it) and joins that
  node. Other calls under one key pair with results first-in first-out. A result without a
  call closes a node without input.
* A sequence gap that does not fill in within the window marks the run's open nodes
  incomplete (``sequence-gap``), and so are nodes that open in the step the gap ran into
  (what is missing may be their first event); redelivered and too-late events are dropped.

What happens is told to a :class:`NodeListener` as it happens, in order; each consumer keeps
what it needs (commit holds, write batches, counters). Nothing here reads a clock or does I/O:
``now_ms`` is the caller's idle-clock reading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, cast

from runtrail.events.models import Event
from runtrail.events.runtime_events import (
    ModelReasoning,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
)
from runtrail.nodes.keys import call_key, non_empty
from runtrail.nodes.order import Gap, Outcome, Released, RunSequencer, Stale
from runtrail.nodes.text import append_reasoning, append_text
from runtrail.nodes.tokens import Usage, keep_last, parse_usage

NodeType = Literal["MODEL", "TOOL"]
ModelKey = tuple[str, str, str | None, int | None]
ToolKey = tuple[str, str, str | None, int | None, str]

#: Why a node is incomplete.
SEQUENCE_GAP = "sequence-gap"
IDLE = "idle"
#: Why an event formed no part of any node (the labels :meth:`NodeListener.dropped` gets).
NO_OPEN_REQUEST = "no-open-request"
SUPERSEDED_REQUEST = "superseded-request"
DUPLICATE = "duplicate"
LATE = "late"

_GAP = object()  # a gap was reported; the step it ran into is not known yet


class Node:
    """One node being assembled (open) or just completed: plain data, read by consumers."""

    __slots__ = (
        "attempt_at",
        "attempt_raw",
        "attempt_said",
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
        "result",
        "retries",
        "run_id",
        "serial",
        "session_id",
        "started_at",
        "step",
        "tag",
        "tenant_id",
        "text",
        "tokens",
        "touched_ms",
        "turn_id",
    )

    def __init__(
        self,
        serial: int,
        node_type: NodeType,
        tenant_id: str,
        run_id: str,
        turn_id: str | None,
        step: int | None,
        partition: int,
        offset: int,
        occurred_at: str,
        session_id: str | None = None,
    ) -> None:
        self.serial = serial
        self.node_type: NodeType = node_type
        self.tenant_id = tenant_id
        self.run_id = run_id
        self.session_id = session_id
        self.turn_id = turn_id
        self.step = step
        self.call_key = ""  # TOOL only: the pairing suffix
        self.partition = partition
        self.first_offset = offset
        self.last_offset = offset
        #: offsets a re-read must skip if a commit point falls inside this node: the opening
        #: event's, and for a TOOL node every saying of the call and the result
        self.offsets: list[int] = [offset]
        self.started_at = occurred_at
        self.last_at = occurred_at
        self.touched_ms = 0
        self.event_ids: list[str] = []
        self.inputs: Any = None  # MODEL: the prompt; TOOL: the call as published
        self.model_id: str | None = None
        self.text = ""  # MODEL outputText: every delta of the node, concatenated
        self.raw: Any = None  # MODEL: latest non-empty raw; TOOL: the result as published
        self.result: ToolResult | None = None  # TOOL: the result event's data
        self.reasoning = ""
        self.retries = 0
        self.tokens: Usage = (None, None)
        self.incomplete: str | None = None
        #: the latest attempt (since the request or the last MODEL_RETRY): where its text
        #: starts in ``text``, whether it said a message (even ""), whether ``raw`` is its own
        self.attempt_at = 0
        self.attempt_said = False
        self.attempt_raw = False
        #: what a consumer attached (resume: the content key or intent); never read here
        self.tag: Any = None

    @property
    def answer(self) -> str | None:
        """The latest attempt's message (None when it said none)."""
        return self.text[self.attempt_at :] if self.attempt_said else None

    @property
    def answer_raw(self) -> Any:
        """The latest attempt's raw payload (None when it gave none)."""
        return self.raw if self.attempt_raw else None

    @property
    def answered(self) -> bool:
        """Whether the latest attempt produced a message or a raw payload."""
        return self.attempt_said or self.attempt_raw

    def new_attempt(self) -> None:
        """A MODEL_RETRY: what the failed attempt produced is not the node's answer."""
        self.attempt_at = len(self.text)
        self.attempt_said = self.attempt_raw = False


class NodeListener:
    """What an assembly tells its consumer, in event order. Every hook defaults to nothing."""

    def skip(self, event: Event, partition: int, offset: int) -> bool:
        """Whether a released node event must not be assembled (capture: a straddler's tail)."""
        return False

    def applied(self, event: Event, partition: int) -> None:
        """An event of any type was released in sequence order."""

    def opened(self, node: Node) -> None:
        """``node`` opened (its inputs are set)."""

    def lowered(self, node: Node) -> None:
        """An event read earlier than ``node.first_offset`` joined it (arrival was out of order)."""

    def touched(self, node: Node) -> None:
        """An event joined open ``node``."""

    def superseded(self, old: Node, new: Node) -> None:
        """A second MODEL_REQUEST in the step replaced ``old`` by ``new`` (already opened)."""

    def closed(self, node: Node) -> None:
        """``node`` is complete (STEP_END, TOOL_RESULT) or expired; it is no longer open."""

    def tainted(self, node: Node) -> None:
        """A sequence gap made open ``node`` incomplete."""

    def dropped(self, reason: str, count: int = 1) -> None:
        """``count`` events formed no part of any node, for ``reason``."""


_Handler = Callable[["NodeAssembly", Event, int, int, int, NodeListener], None]


class NodeAssembly:
    """The open nodes of the partitions a consumer owns; see the module docstring.

    ``order`` puts events back in sequence order (the consumer sets its window and anchor).
    """

    def __init__(self, order: RunSequencer | None = None) -> None:
        self._order = RunSequencer() if order is None else order
        self._models: dict[ModelKey, Node] = {}
        self._tools: dict[ToolKey, list[Node]] = {}
        self._serial = 0
        #: runs just past a gap -> the (turn, step) released first after it (_GAP until known)
        self._suspect: dict[tuple[str, str], object] = {}
        self._tainting = False

    # --- the hot path ----------------------------------------------------------------------
    def feed(
        self, event: Event, partition: int, offset: int, now_ms: int, listener: NodeListener
    ) -> None:
        """Account for one event read at ``offset``; tells ``listener`` what it completes."""
        if not self._suspect and self._order.in_order(event, partition, now_ms):
            listener.applied(event, partition)
            handler = _HANDLERS.get(event.type)
            if handler is not None and not listener.skip(event, partition, offset):
                handler(self, event, partition, offset, now_ms, listener)
            return
        self._apply(self._order.feed(event, partition, offset, now_ms), now_ms, listener)

    def _apply(self, outcomes: Iterable[Outcome], now: int, listener: NodeListener) -> None:
        for outcome in outcomes:
            if isinstance(outcome, Released):
                event, partition, offset = outcome
                listener.applied(event, partition)
                handler = _HANDLERS.get(event.type)
                if handler is None or listener.skip(event, partition, offset):
                    continue
                if self._suspect:
                    self._tainting = self._after_gap(event)
                handler(self, event, partition, offset, now, listener)
                self._tainting = False
            elif isinstance(outcome, Gap):
                self._taint(outcome, listener)
            elif isinstance(outcome, Stale):
                listener.dropped(outcome.reason)

    def _taint(self, gap: Gap, listener: NodeListener) -> None:
        """A run's events are missing: none of its open nodes can be trusted whole."""
        for node in self.open_nodes():
            if node.tenant_id == gap.tenant_id and node.run_id == gap.run_id:
                node.incomplete = SEQUENCE_GAP
                listener.tainted(node)
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

    def _open(self, node_type: NodeType, event: Event, partition: int, offset: int) -> Node:
        self._serial += 1
        node = Node(
            self._serial,
            node_type,
            event.tenant_id,
            event.run_id,
            event.turn_id,
            event.step,
            partition,
            offset,
            event.occurred_at,
            event.session_id,
        )
        if self._tainting:
            node.incomplete = SEQUENCE_GAP
        return node

    @staticmethod
    def _touch(node: Node, event: Event, offset: int, now: int, listener: NodeListener) -> None:
        node.event_ids.append(event.event_id)
        if offset < node.first_offset:
            node.first_offset = offset
            listener.lowered(node)
        if offset > node.last_offset:
            node.last_offset = offset
        node.last_at = event.occurred_at
        node.touched_ms = now
        if node.session_id is None:
            node.session_id = event.session_id
        listener.touched(node)

    def _on_model_request(
        self, event: Event, partition: int, offset: int, now: int, listener: NodeListener
    ) -> None:
        key: ModelKey = (event.tenant_id, event.run_id, event.turn_id, event.step)
        old = self._models.get(key)
        node = self._models[key] = self._open("MODEL", event, partition, offset)
        prompt = cast(ModelRequest, event.data).prompt
        node.inputs = prompt
        model = prompt.get("model") if isinstance(prompt, dict) else None
        node.model_id = model if isinstance(model, str) else None
        if old is not None:  # ai4j restarts the node: the earlier call is not its content
            node.retries = old.retries  # runtrail's SDK re-sends the request after MODEL_RETRY
            # the count comes from the superseded call's events: a re-read must include them
            node.first_offset = min(node.first_offset, old.first_offset)
        listener.opened(node)
        if old is not None:
            listener.superseded(old, node)
        self._touch(node, event, offset, now, listener)

    def _on_model_event(
        self, event: Event, partition: int, offset: int, now: int, listener: NodeListener
    ) -> None:
        node = self._models.get((event.tenant_id, event.run_id, event.turn_id, event.step))
        if node is None:
            listener.dropped(NO_OPEN_REQUEST)
            return
        kind = event.type
        if kind == "MODEL_RESPONSE":
            response = cast(ModelResponse, event.data)
            node.text = append_text(node.text, response.message)
            if response.message is not None:
                node.attempt_said = True
            if non_empty(response.raw):
                node.raw = response.raw
                node.attempt_raw = True
                node.tokens = keep_last(node.tokens, parse_usage(response.raw))
        elif kind == "MODEL_REASONING":
            node.reasoning = append_reasoning(node.reasoning, cast(ModelReasoning, event.data).text)
        else:  # MODEL_RETRY
            node.retries += 1
            node.new_attempt()
        self._touch(node, event, offset, now, listener)

    def _on_step_end(
        self, event: Event, partition: int, offset: int, now: int, listener: NodeListener
    ) -> None:
        node = self._models.pop((event.tenant_id, event.run_id, event.turn_id, event.step), None)
        if node is None:
            return
        self._touch(node, event, offset, now, listener)
        listener.closed(node)

    def _on_tool_call(
        self, event: Event, partition: int, offset: int, now: int, listener: NodeListener
    ) -> None:
        call = cast(ToolCall, event.data)
        key = _tool_key(event, call.call_id, call.tool_name)
        inputs = call.json_form()  # the call as published (v2: with its type)
        queue = self._tools.get(key)
        if queue is None:
            queue = self._tools[key] = []
        elif call.call_id is not None and queue[-1].inputs == inputs:
            node = queue[-1]  # the same call said twice: one node
            node.offsets.append(offset)
            self._touch(node, event, offset, now, listener)
            return
        node = self._open("TOOL", event, partition, offset)
        node.call_key = key[4]
        node.inputs = inputs
        queue.append(node)
        listener.opened(node)
        self._touch(node, event, offset, now, listener)

    def _on_tool_result(
        self, event: Event, partition: int, offset: int, now: int, listener: NodeListener
    ) -> None:
        result = cast(ToolResult, event.data)
        key = _tool_key(event, result.call_id, result.tool_name)
        queue = self._tools.get(key)
        if queue:
            node = queue.pop(0)
            if not queue:
                del self._tools[key]
            node.offsets.append(offset)
        else:  # an orphan result: a node without input
            node = self._open("TOOL", event, partition, offset)
            node.call_key = key[4]
            if self._order.missed_before((event.tenant_id, event.run_id), event.sequence):
                node.incomplete = SEQUENCE_GAP  # its call may be what went missing
            listener.opened(node)
        node.result = result
        node.raw = result.json_form()  # the result as published (v2: ok, failed…)
        self._touch(node, event, offset, now, listener)
        listener.closed(node)

    # --- state a consumer kept ---------------------------------------------------------------
    def restore(self, node: Node) -> None:
        """Put back an open node a consumer persisted (resume-cache: its store's open state)."""
        self._serial += 1
        node.serial = self._serial
        if node.node_type == "MODEL":
            self._models[(node.tenant_id, node.run_id, node.turn_id, node.step)] = node
            return
        key = (node.tenant_id, node.run_id, node.turn_id, node.step, node.call_key)
        self._tools.setdefault(key, []).append(node)

    # --- housekeeping ------------------------------------------------------------------------
    def expire(self, now_ms: int, listener: NodeListener, forget_ms: int | None = None) -> None:
        """Give up sequence waits older than ``wait_ms``; forget runs idle over ``forget_ms``."""
        self._apply(self._order.expire(now_ms, forget_ms), now_ms, listener)

    def idle(self, now_ms: int, idle_ms: int) -> list[Node]:
        """Remove nodes untouched for more than ``idle_ms``, marked incomplete (``idle`` unless
        a gap marked them), oldest first per partition: a step that never ends (a crashed
        agent) must not hold memory or offsets forever."""
        stale = [n for n in self.open_nodes() if now_ms - n.touched_ms > idle_ms]
        stale.sort(key=lambda n: (n.partition, n.first_offset))
        for node in stale:
            self._forget(node)
            if node.incomplete is None:
                node.incomplete = IDLE
        return stale

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        """Forget open nodes and buffers of revoked partitions; their new owner re-reads them."""
        gone = set(partitions)
        for node in [n for n in self.open_nodes() if n.partition in gone]:
            self._forget(node)
        self._order.drop_partitions(gone)
        self._suspect.clear()

    def open_nodes(self) -> Iterator[Node]:
        """Every open node (model nodes first, then tool nodes in pairing order)."""
        nodes = list(self._models.values())
        for queue in self._tools.values():
            nodes.extend(queue)
        return iter(nodes)

    def open_count(self) -> int:
        """How many nodes are open (for metrics)."""
        return len(self._models) + sum(len(q) for q in self._tools.values())

    def open_tools(self, node: Node) -> list[Node]:
        """The open tool nodes under ``node``'s pairing key, oldest first."""
        key = (node.tenant_id, node.run_id, node.turn_id, node.step, node.call_key)
        return list(self._tools.get(key, ()))

    def lowest_offset(self, partition: int) -> int | None:
        """The lowest offset of an open node's events on ``partition`` (None: none open)."""
        firsts = [n.first_offset for n in self.open_nodes() if n.partition == partition]
        return min(firsts) if firsts else None

    def floor(self, partition: int) -> int | None:
        """The lowest offset buffered on ``partition``, not assembled yet (do not commit it)."""
        return self._order.floor(partition)

    def buffered(self) -> int:
        """How many events wait for a missing predecessor of their run (for metrics)."""
        return self._order.buffered()

    def _forget(self, node: Node) -> None:
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


def _tool_key(event: Event, call_id: str | None, tool_name: str | None) -> ToolKey:
    """Where a TOOL_CALL or TOOL_RESULT pairs: its run's step and :func:`call_key`."""
    return (event.tenant_id, event.run_id, event.turn_id, event.step, call_key(call_id, tool_name))


_HANDLERS: dict[str, _Handler] = {
    "MODEL_REQUEST": NodeAssembly._on_model_request,
    "MODEL_RESPONSE": NodeAssembly._on_model_event,
    "MODEL_REASONING": NodeAssembly._on_model_event,
    "MODEL_RETRY": NodeAssembly._on_model_event,
    "STEP_END": NodeAssembly._on_step_end,
    "TOOL_CALL": NodeAssembly._on_tool_call,
    "TOOL_RESULT": NodeAssembly._on_tool_result,
}
