"""Token counts of a provider's raw response, for run projections.

The parser is the one capture uses (:mod:`runtrail.nodes.tokens`, following ai4j), so a run's
token totals and its capture records never disagree about the same payload.
"""

from __future__ import annotations

from runtrail.nodes.tokens import INPUT_KEYS, OUTPUT_KEYS, parse_usage

#: The projection's historical name for the shared parser.
raw_usage = parse_usage

__all__ = ["INPUT_KEYS", "OUTPUT_KEYS", "raw_usage"]
