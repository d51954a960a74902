"""The OTLP receiver's process: an HTTP server feeding the Publisher, plus /metrics and health.

Not a topic consumer, so not a :class:`runtrail.runtime.service.Service`: ``runtrail run
otlp-ingest`` starts it through :data:`runtrail.runtime.registry.RECEIVERS`. It keeps what
every service has: ``/metrics``, ``/healthz`` (the process's loop turns) and ``/readyz`` (the
receiver is listening and the publisher is not closed) on the metrics port (default 9460).
Stopping (SIGTERM/SIGINT) answers new requests 503, then closes the publisher, which waits
(bounded) for the broker and leaves anything unsent in its durable spool for the next start.
Credentials the cluster refuses stop it (``runtrail.kafka.auth``).

In mode ``forward`` its publisher writes raw records to the raw topic (:mod:`.forwarding`),
with a spool of its own; in mode ``map`` events to the events topic (:class:`.http_api.Ingest`).
"""

from __future__ import annotations

import os

from confluent_kafka import KafkaError

from runtrail.kafka.auth import KafkaAuthError
from runtrail.publisher import Publisher
from runtrail.runtime.receiver import ServingReceiver, tenant_auth
from runtrail_services.otlp_ingest.drop_records import ReceiverDrops, open_drops
from runtrail_services.otlp_ingest.forwarding import Forwarder
from runtrail_services.otlp_ingest.http_api import Ingest, IngestServer, SpanSink
from runtrail_services.otlp_ingest.metrics import IngestMetrics
from runtrail_services.otlp_ingest.settings import OtlpIngestSettings


class OtlpIngestReceiver(ServingReceiver[OtlpIngestSettings]):
    """One receiver process; :meth:`run` serves until :meth:`request_stop`."""

    name = "otlp-ingest"
    default_port = 9460
    own_settings = OtlpIngestSettings

    def open(self) -> None:
        auth = tenant_auth(self.name, self.own)
        forward = self.own.mode == "forward"
        self.topic = self.settings.otlp_raw_topic if forward else self.settings.events_topic
        self.publisher = Publisher(self.settings, registry=self.registry, topic=self.topic)
        self.drops: ReceiverDrops | None = None
        try:
            self.metrics = IngestMetrics(self.registry)
            self.drops = ReceiverDrops(open_drops(self.settings))
            self.ingest: SpanSink
            if forward:
                self.ingest = Forwarder(self.publisher, self.metrics, self.drops)
            else:
                self.ingest = Ingest(
                    self.publisher,
                    self.metrics,
                    max_traces=self.own.max_traces,
                    session_resource_attribute=self.own.session_resource_attribute,
                    drops=self.drops,
                )
            self.server = IngestServer(
                self.own.http_host,
                self.own.http_port,
                self.ingest,
                auth,
                max_body_bytes=self.own.max_body_bytes,
                max_decoded_bytes=self.own.max_decoded_bytes,
            )
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        self.publisher.close(timeout=1)  # nothing was published; no thread left behind
        if self.drops is not None:
            self.drops.close()

    def serving(self) -> str:
        return (
            f"otlp-ingest (pid {os.getpid()}, mode {self.own.mode}) on "
            f"{self.own.http_host}:{self.port} (/v1/traces, /v1/logs) -> {self.topic}"
        )

    def serve(self) -> None:
        """Beat until stopped. Credentials the cluster refuses stop the receiver (exit 1,
        the refusal said once): spans it accepted meanwhile wait in the spool."""
        while not self._stop.wait(1.0):
            self.health.beat()
            refused = self.publisher.refused
            if refused is not None:
                raise KafkaAuthError(KafkaError(KafkaError._AUTHENTICATION, refused), refused)

    def shut_down(self) -> None:
        self.ingest.accepting = False
        self.server.stop()
        self.publisher.close()
        if self.drops is not None:
            self.drops.close()
