"""How many examples a property test tries.

``make test`` and CI try the full count; ``make test-fast``, the inner loop, sets
``RUNTRAIL_TEST_FAST=1`` and tries a tenth, so a property that breaks is still found there most of
the time, and always by the full run before a change lands.
"""

from __future__ import annotations

import os

FAST_ENV = "RUNTRAIL_TEST_FAST"


def examples(full: int) -> int:
    """``full`` examples, or a tenth of them (at least 10) in the inner loop."""
    if os.environ.get(FAST_ENV, "").strip() in ("1", "true", "yes"):
        return max(10, full // 10)
    return full
