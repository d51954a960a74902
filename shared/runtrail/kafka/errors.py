"""The one exception type of the local-broker tooling, so callers can catch it alone."""

from __future__ import annotations


class BrokerError(RuntimeError):
    """The local broker cannot be fetched, formatted, started, reached or stopped."""
