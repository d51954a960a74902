"""Seed 000 §1 node assembly, written once for every consumer that forms nodes.

Capture (``runtrail.capture.pairer``) and the resume cache (``runtrail.resume.builder``) both
consume :class:`NodeAssembly`, which pairs runtime events into nodes; neither pairs anything
itself. What they must agree on lives here, one mechanism each:

* :mod:`.assembly` — the pairing state machine: model nodes (open, restart, accumulate,
  retries, STEP_END), tool nodes (FIFO per call key, a call said twice is one node), gaps;
* :mod:`.keys` — pairing keys (``callId``, else ``toolName``, else ``anon``) and what counts as
  a non-empty raw payload;
* :mod:`.text` — how response deltas and reasoning segments accumulate (ai4j's rules);
* :mod:`.tokens` — the one token parser (capture and projection use it), per-slot keep-last;
* :mod:`.order` — per-run sequence order: events are assembled by sequence, not arrival.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the pairing keys, the token parser) does not load the assembly and the
event model it pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.nodes.assembly import Node, NodeAssembly, NodeListener
    from runtrail.nodes.keys import call_key, non_empty
    from runtrail.nodes.order import Gap, Released, RunSequencer, Stale
    from runtrail.nodes.text import append_reasoning, append_text
    from runtrail.nodes.tokens import keep_last, parse_usage

__getattr__ = lazy_exports(
    __name__,
    {
        ".assembly": ("Node", "NodeAssembly", "NodeListener"),
        ".keys": ("call_key", "non_empty"),
        ".order": ("Gap", "Released", "RunSequencer", "Stale"),
        ".text": ("append_reasoning", "append_text"),
        ".tokens": ("keep_last", "parse_usage"),
    },
)

__all__ = [
    "Gap",
    "Node",
    "NodeAssembly",
    "NodeListener",
    "Released",
    "RunSequencer",
    "Stale",
    "append_reasoning",
    "append_text",
    "call_key",
    "keep_last",
    "non_empty",
    "parse_usage",
]
