"""What a receiver process shares: the processes ``runtrail run`` starts that are not consumers
(``otlp-ingest``, ``command-api``, ``outbox-relay``).

Each one has settings, a metrics registry, health, a stop event, a metrics/health endpoint on
its default port, stop signals and a heartbeat while it serves. They were written three times;
here once, so the next receiver is only its own work.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.runtime import stop_signals
from runtrail.runtime.http import EndpointAuth, HealthState, HttpEndpoint


class Receiver:
    """Base of the receivers; subclasses set :attr:`name` and :attr:`default_port`."""

    name: ClassVar[str] = ""
    #: the metrics/health port when neither ``--metrics-port`` nor the settings give one
    default_port: ClassVar[int] = 0

    def __init__(self, settings: Settings, registry: CollectorRegistry | None) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.health = HealthState()
        self._stop = threading.Event()

    def metrics_endpoint(self, metrics_port: int | None) -> HttpEndpoint:
        """The metrics/health endpoint: ``metrics_port``, else the settings', else the default."""
        port = metrics_port if metrics_port is not None else self.settings.metrics_port
        return HttpEndpoint(
            self.settings.metrics_host,
            self.default_port if port is None else port,
            self.registry,
            self.health,
            EndpointAuth.from_settings(self.settings),
        )

    def install_signal_handlers(self) -> None:
        stop_signals.install(self.name, self.request_stop)

    def request_stop(self) -> None:
        self._stop.set()

    def beat_until_stopped(self, interval_s: float = 1.0) -> None:
        """Keep the health heartbeat going until a stop is asked for."""
        while not self._stop.wait(interval_s):
            self.health.beat()
