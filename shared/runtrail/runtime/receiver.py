"""What a receiver process shares: the processes ``runtrail run`` starts that are not consumers
(``otlp-ingest``, ``command-api``, ``outbox-relay``).

Each one has core and own settings, a metrics registry, health, a stop event, a metrics/health
endpoint on its default port, stop signals, and one life: open what it needs, start, serve
until a stop is asked for, then shut down with health saying so. That life is here once; a
receiver is only its own work (:meth:`Receiver.open`, :meth:`~Receiver.start`,
:meth:`~Receiver.shut_down`, and :meth:`~Receiver.serve` when beating is not all it does).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import ClassVar, Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry

from runtrail.config import ServiceSettings, Settings, TenantTokenSettings
from runtrail.http_server import TokenAuth
from runtrail.kafka.auth import KafkaAuthError
from runtrail.kafka.durability import CHECK_TIMEOUT_S, start_durability_check
from runtrail.kafka.topics import design_topic_names
from runtrail.runtime import stop_signals
from runtrail.runtime.http import EndpointAuth, HealthState, HttpEndpoint

log = logging.getLogger(__name__)

OwnSettings = TypeVar("OwnSettings", bound=ServiceSettings)


class Receiver(Generic[OwnSettings]):
    """Base of the receivers; subclasses set :attr:`name`, :attr:`default_port` and
    :attr:`own_settings`. Made as ``cls(settings, options=…, metrics_port=…)`` by ``runtrail run``."""

    name: ClassVar[str] = ""
    #: the metrics/health port when neither ``--metrics-port`` nor the settings give one
    default_port: ClassVar[int] = 0
    #: the receiver's own settings (``RUNTRAIL_<RECEIVER>_*``, overridden by ``-o``)
    own_settings: type[OwnSettings]

    def __init__(
        self,
        settings: Settings,
        *,
        options: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.health = HealthState()
        self._stop = threading.Event()
        self.own: OwnSettings = self.own_settings.load(options)
        self.open()
        try:
            self.endpoint = self.metrics_endpoint(metrics_port)
        except BaseException:
            self.abandon()
            raise

    def open(self) -> None:
        """Open what the receiver works with (stores, servers bound but not started)."""

    def abandon(self) -> None:
        """Let go of what :meth:`open` took when the receiver cannot be made (nothing started)."""

    def start(self) -> None:
        """Start serving (after the metrics endpoint), and say so."""

    def serve(self) -> None:
        """The receiver's work until a stop is asked for; by default its servers' threads do
        it, and this keeps the health heartbeat going."""
        self.beat_until_stopped()

    def shut_down(self) -> None:
        """Stop serving and close what :meth:`open` opened (before the metrics endpoint)."""

    def run(self) -> int:
        """Serve until stopped; the process exit status."""
        self.endpoint.start()
        self.start()
        durability = start_durability_check(
            self.settings, design_topic_names(self.settings), self.name
        )
        status = 0
        try:
            self.serve()
        except KafkaAuthError as exc:  # a refused login: stop, saying why, rather than retry
            log.error("%s: %s; stopping", self.name, exc)
            status = 1
        finally:
            self.health.stopping = True
            self.shut_down()
            self.endpoint.stop()
            durability.join(timeout=CHECK_TIMEOUT_S)
        return status

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


class Serving(Protocol):
    """An HTTP server a receiver runs: bound when made (its port known), answering from
    :meth:`start`."""

    @property
    def port(self) -> int: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class ServingReceiver(Receiver[OwnSettings]):
    """A receiver whose work is answering on one HTTP server (:attr:`server`, made by
    :meth:`~Receiver.open`): ready once the server answers."""

    server: Serving

    @property
    def port(self) -> int:
        """The server's port (a free one when 0 was asked for)."""
        return self.server.port

    def start(self) -> None:
        self.server.start()
        self.health.ready = True
        log.info(
            "%s; metrics on %s:%d", self.serving(), self.settings.metrics_host, self.endpoint.port
        )

    def serving(self) -> str:
        """The start line's first part: the process, where it answers, where its work goes."""
        return f"{self.name} (pid {os.getpid()}) on port {self.port}"


def tenant_auth(name: str, own: TenantTokenSettings) -> TokenAuth:
    """The bearer-token auth of a receiver that answers tenants; none configured is legal (a
    receiver not yet given tokens) but every request then gets 401, so it is said at start."""
    tokens = own.tenant_tokens()
    if not tokens:
        log.warning("%s: no tenant tokens configured; every request gets 401", name)
    return TokenAuth(tokens)
