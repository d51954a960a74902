"""The ``run.resumed`` payload: one place that says who continued a run and from where.

A resume is a fact about the process, not about any one call: the recorder publishes it
before the new life's first own event (:meth:`RunRecorder.watch`), the LangGraph handler when it
continues a wait another process left. Both build the payload here, so every path names the
process the same way (host and pid of this process).
"""

from __future__ import annotations

import os
import socket
from typing import Any

EVENT_TYPE = "run.resumed"


def resumed_data(
    *,
    after_sequence: int | None,
    at_step: int | None,
    cached_steps: int = 0,
    cache_hits: int = 0,
    previous_process: str | None = None,
) -> dict[str, Any]:
    """The payload of ``run.resumed`` for this process (camelCase, as published)."""
    return {
        "host": socket.gethostname() or None,
        "pid": os.getpid(),
        "previousProcess": previous_process,
        "afterSequence": after_sequence if after_sequence else None,
        "atStep": at_step,
        "cachedSteps": cached_steps,
        "cacheHits": cache_hits,
    }
