"""Token counts of a raw model response: the one parser lives in :mod:`runtrail.nodes.tokens`.

Kept as an import path for existing callers; capture and projection share that parser.
"""

from __future__ import annotations

from runtrail.nodes.tokens import INPUT_KEYS, OUTPUT_KEYS, keep_last, parse_usage

__all__ = ["INPUT_KEYS", "OUTPUT_KEYS", "keep_last", "parse_usage"]
