"""A tenant's span mapper and log join, made on first use, the same way for every path.

Why: a receiver that maps spans itself and a mapper fed by forwarding receivers must number a
trace's events identically (a trace split over receivers is one run either way), so both hold
their per-tenant state here, built from the same two settings. Tenants never share a mapper:
one tenant's traces cannot evict or join another's.
"""

from __future__ import annotations

from runtrail.adapters.otel_logs import LogJoin
from runtrail.adapters.otel_mapping import TraceMapper


class TenantMappers:
    """One :class:`TraceMapper` and one :class:`LogJoin` per tenant, each bounded by
    ``max_traces``."""

    def __init__(self, max_traces: int, session_resource_attribute: str | None) -> None:
        self.max_traces = max_traces
        self.session_resource_attribute = session_resource_attribute
        self._mappers: dict[str, TraceMapper] = {}
        self._joins: dict[str, LogJoin] = {}

    def mapper(self, tenant: str) -> TraceMapper:
        mapper = self._mappers.get(tenant)
        if mapper is None:
            mapper = self._mappers[tenant] = TraceMapper(
                max_traces=self.max_traces,
                session_resource_attribute=self.session_resource_attribute,
            )
        return mapper

    def join(self, tenant: str) -> LogJoin:
        join = self._joins.get(tenant)
        if join is None:
            join = self._joins[tenant] = LogJoin(max_waiting=self.max_traces)
        return join

    @property
    def open_traces(self) -> int:
        """Traces whose root span has not ended yet, over every tenant."""
        return sum(m.open_traces for m in self._mappers.values())
