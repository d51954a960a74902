"""The fixed port table of the local stack, shared with docker-compose, Kubernetes and Prometheus.

Every service gets a metrics/health port at ``base + offset``; services that serve an API
(resume-cache lookups, the sessions API) get the next port for it. The offsets are fixed, so
``deploy/prometheus/prometheus.yml``, ``docker-compose.yml`` and ``deploy/k8s/`` can name the same
ports (a test keeps them in step); moving ``base`` shifts the whole table, which is how the
tests run a stack beside a developer's. A service registered after this table was written gets
a slot past the known ones, in registry order, so it still runs before anyone edits this file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

#: Default first port: ``runtrail run noop`` already listens here by default.
DEFAULT_BASE = 9400

#: service -> offset of its metrics port from the base (the API, if any, is offset + 1).
METRICS_OFFSETS: dict[str, int] = {
    "noop": 0,
    "capture": 10,
    "resume-cache": 20,
    "sessions": 30,
    "audit": 40,
    "projector": 50,
    # receivers: no consumer group, but a /metrics port all the same. 60 stays otlp-ingest's
    # (its own default, 9460; the stack does not run it), 80 and 90 are the ui's and the demo
    # agent's, so the command API (its HTTP API on metrics + 1) comes after them.
    "outbox-relay": 70,
    "command-api": 100,
}
#: Offset of the demo agent's own /metrics (its publishers' series, spool depth included).
AGENT_OFFSET = 90
#: Offset of the run explorer (``runtrail ui``), which ``dev up`` starts with the services.
UI_OFFSET = 80
#: First offset handed to services this table does not know yet.
_UNKNOWN_FROM = 110
_STRIDE = 10

DEFAULT_PROMETHEUS_PORT = 9090


@dataclass(frozen=True)
class PortPlan:
    """Ports of one stack: metrics per service, APIs, the demo agent."""

    base: int
    metrics: dict[str, int] = field(default_factory=dict)
    api: dict[str, int] = field(default_factory=dict)
    agent: int = DEFAULT_BASE + AGENT_OFFSET
    ui: int = DEFAULT_BASE + UI_OFFSET

    def all_ports(self) -> list[int]:
        """Every port the services of this plan listen on (not the agent's: it is the demo's)."""
        return sorted({*self.metrics.values(), *self.api.values()})


def metrics_offset(service: str, known: Iterable[str]) -> int:
    """The fixed offset of ``service``; unknown services follow the table in ``known`` order."""
    if service in METRICS_OFFSETS:
        return METRICS_OFFSETS[service]
    unknown = [name for name in known if name not in METRICS_OFFSETS]
    return _UNKNOWN_FROM + _STRIDE * unknown.index(service)


def plan_ports(
    services: Iterable[str], base: int = DEFAULT_BASE, with_api: Iterable[str] = ()
) -> PortPlan:
    """The plan for ``services`` (in registry order) starting at ``base``; those in
    ``with_api`` (their settings have an ``http_port``) also get ``metrics port + 1``."""
    names = list(services)
    metrics = {name: base + metrics_offset(name, names) for name in names}
    wanted = set(with_api)
    api = {name: metrics[name] + 1 for name in names if name in wanted}
    return PortPlan(
        base=base, metrics=metrics, api=api, agent=base + AGENT_OFFSET, ui=base + UI_OFFSET
    )


def find_free_base(
    services: Iterable[str],
    *,
    extra_offsets: Iterable[int] = (AGENT_OFFSET, UI_OFFSET),
    low: int = 10000,
    high: int = 32700,
    attempts: int = 200,
) -> int:
    """A base whose whole table (metrics and API ports, plus ``extra_offsets``) is free now,
    so a second stack (a test's) runs beside a developer's on the default ports.

    The range stays below Linux's ephemeral ports (32768-60999): there, any outgoing
    connection (a Kafka client's, say) may take a planned port between this check and the
    service's bind."""
    import random

    from runtrail_tools.kafka.ports import port_bindable

    names = list(services)
    # every known slot too: a stack may start the receivers a caller did not name
    offsets = {metrics_offset(n, names) for n in names} | set(METRICS_OFFSETS.values())
    wanted = sorted(offsets | {o + 1 for o in offsets} | set(extra_offsets))
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(low, high - 100, 100)
        if all(port_bindable(base + offset) for offset in wanted):
            return base
    raise OSError(f"no free block of ports for a stack between {low} and {high}")
