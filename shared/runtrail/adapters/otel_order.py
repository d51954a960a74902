"""The order the spans of one trace in one batch are mapped in: by time, not by arrival.

A span exported by the SDK arrives when it *ends*, so a parent comes after its children, and an
instrumentation that ends a model span after the tool span it produced (Google ADK nests the
tool span inside the model span) would put the model call after its tool call. The mapping
instead places:

* a model or tool span (it opens a node: MODEL_REQUEST, TOOL_CALL) at its **start**; at equal
  starts a parent before its children (depth in the batch);
* any other span (it can only close something: a turn's step, the run) at its **end**; at
  equal ends a child before its parent, and before a node that starts at that moment (one
  span ending as the next starts is the common case, a zero-length last child the rare one);
* the local root last (it ends the run, after everything of its trace in the batch).

Every child starts no earlier than its parent and ends no later, so a span that closes a turn
comes after every node opened under it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from runtrail.adapters.otel_spans import SpanView


def depths(spans: Collection[SpanView]) -> dict[str, int]:
    """Each span's depth among ``spans`` (0: its parent is not among them)."""
    parent_of = {s.span_id: s.parent_span_id for s in spans}
    out: dict[str, int] = {}
    for span in spans:
        depth, parent = 0, span.parent_span_id
        while parent in parent_of and depth <= len(parent_of):  # the bound: a cycle ends
            depth += 1
            parent = parent_of[parent]
        out[span.span_id] = depth
    return out


def mapping_order(
    spans: Collection[SpanView], opens_node: Callable[[SpanView], bool]
) -> list[SpanView]:
    """``spans`` (of one trace) in the order above; ``opens_node``: a model or tool span."""
    depth = depths(spans)

    def key(span: SpanView) -> tuple[bool, int, bool, int]:
        if opens_node(span):
            return (span.local_root, span.start_ns, True, depth[span.span_id])
        return (span.local_root, span.end_ns, False, -depth[span.span_id])

    return sorted(spans, key=key)
