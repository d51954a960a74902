"""The OTLP receiver's process: an HTTP server feeding the Publisher, plus /metrics and health.

Not a topic consumer, so not a :class:`runtrail.runtime.service.Service`: ``runtrail run
otlp-ingest`` starts it through :data:`runtrail.runtime.registry.RECEIVERS`. It keeps what
every service has: ``/metrics``, ``/healthz`` (the process's loop turns) and ``/readyz`` (the
receiver is listening and the publisher is not closed) on the metrics port (default 9460).
Stopping (SIGTERM/SIGINT) answers new requests 503, then closes the publisher, which waits
(bounded) for the broker and leaves anything unsent in its durable spool for the next start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from runtrail.config import Settings
from runtrail.http_server import TokenAuth
from runtrail.publisher import Publisher
from runtrail.runtime import stop_signals
from runtrail.runtime.http import EndpointAuth, HealthState, HttpEndpoint
from runtrail_services.otlp_ingest.http_api import Ingest, IngestServer
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.settings import OtlpIngestSettings

log = logging.getLogger(__name__)


class OtlpIngestReceiver:
    """One receiver process; :meth:`run` serves until :meth:`request_stop`."""

    name = "otlp-ingest"
    default_port = 9460

    def __init__(
        self,
        settings: Settings,
        *,
        options: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.own = OtlpIngestSettings.load(options)
        tokens = self.own.tenant_tokens()
        if not tokens:
            log.warning("otlp-ingest: no tenant tokens configured; every request gets 401")
        self.registry = registry or CollectorRegistry()
        self.health = HealthState()
        self._stop = threading.Event()
        self.publisher = Publisher(settings, registry=self.registry)
        try:
            self.metrics = IngestMetrics(self.registry)
            self.ingest = Ingest(self.publisher, self.metrics, max_traces=self.own.max_traces)
            self.server = IngestServer(
                self.own.http_host,
                self.own.http_port,
                self.ingest,
                TokenAuth(tokens),
                max_body_bytes=self.own.max_body_bytes,
                max_decoded_bytes=self.own.max_decoded_bytes,
            )
            port = metrics_port if metrics_port is not None else settings.metrics_port
            self.endpoint = HttpEndpoint(
                settings.metrics_host,
                self.default_port if port is None else port,
                self.registry,
                self.health,
                EndpointAuth.from_settings(settings),
            )
        except BaseException:
            self.publisher.close(timeout=1)  # nothing was published; no thread left behind
            raise

    @property
    def port(self) -> int:
        return self.server.port

    def install_signal_handlers(self) -> None:
        stop_signals.install("otlp-ingest", self.request_stop)

    def request_stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Serve until stopped; the process exit status."""
        self.endpoint.start()
        self.server.start()
        self.health.ready = True
        log.info(
            "otlp-ingest (pid %d) on %s:%d/v1/traces -> %s; metrics on %s:%d",
            os.getpid(),
            self.own.http_host,
            self.server.port,
            self.settings.events_topic,
            self.settings.metrics_host,
            self.endpoint.port,
        )
        try:
            while not self._stop.wait(1.0):
                self.health.beat()
        finally:
            self.health.stopping = True
            self.ingest.accepting = False
            self.server.stop()
            self.publisher.close()
            self.endpoint.stop()
        return 0
