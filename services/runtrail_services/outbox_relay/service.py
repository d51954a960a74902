"""The outbox relay's process: :class:`~runtrail.commands.relay.OutboxRelay` in a loop, plus
``/metrics`` and health.

Not a topic consumer, so started through :data:`runtrail.runtime.registry.RECEIVERS`
(``runtrail run outbox-relay``). A Kafka error rebuilds the relay (a new producer fences the
old one, the outbox is reconciled with the topic again), so a broker outage is waited out;
``/readyz`` answers 503 meanwhile.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from confluent_kafka import KafkaException
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtrail.commands.relay import OutboxRelay
from runtrail.config import Settings
from runtrail.kafka.producer_config import producer_config
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import redact_url
from runtrail.runtime.receiver import Receiver
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_services.outbox_relay.settings import OutboxRelaySettings

log = logging.getLogger(__name__)


class OutboxRelayReceiver(Receiver):
    """One relay process; :meth:`run` relays until :meth:`request_stop`."""

    name = "outbox-relay"
    default_port = 9470

    def __init__(
        self,
        settings: Settings,
        *,
        options: Mapping[str, str] | None = None,
        metrics_port: int | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        super().__init__(settings, registry)
        self.own = OutboxRelaySettings.load(options)
        self.store = open_store(COMMAND_EVENTS, self.own.resolved_store(settings.state_dir))
        self.published = Counter(
            "runtrail_outbox_relay_published", "Events relayed to the topic", registry=self.registry
        )
        self.recovered = Counter(
            "runtrail_outbox_relay_recovered",
            "Outbox events found already on the topic at a restart",
            registry=self.registry,
        )
        self.pending = Gauge(
            "runtrail_outbox_relay_pending", "Events waiting in the outbox", registry=self.registry
        )
        self.endpoint = self.metrics_endpoint(metrics_port)

    def _relay(self) -> OutboxRelay:
        relay = OutboxRelay(
            self.store,
            self.settings.events_topic,
            producer_config(self.settings, **{"client.id": "runtrail-outbox-relay"}),
            self.settings.kafka_config(),
            transactional_id=self.own.transactional_id,
            batch_size=self.own.batch_size,
        )
        relay.start()
        self.recovered.inc(relay.stats.recovered)
        return relay

    def run(self) -> int:
        """Relay until stopped; the process exit status."""
        self.endpoint.start()
        log.info(
            "outbox-relay (pid %d): %s -> %s; metrics on %s:%d",
            os.getpid(),
            redact_url(self.own.resolved_store(self.settings.state_dir)),
            self.settings.events_topic,
            self.settings.metrics_host,
            self.endpoint.port,
        )
        relay: OutboxRelay | None = None
        try:
            while not self._stop.is_set():
                self.health.beat()
                try:
                    if relay is None:
                        relay = self._relay()
                        self.health.ready = True
                    sent = relay.pump()
                except (KafkaException, StoreUnavailable) as exc:
                    log.warning("outbox-relay: %s; rebuilding in %.1fs", exc, self.own.retry_s)
                    self.health.ready = False
                    relay = None
                    self._stop.wait(self.own.retry_s)
                    continue
                self.published.inc(sent)
                self.pending.set(self.store.outbox_size() if sent else 0)
                if not sent:
                    self._stop.wait(self.own.idle_poll_s)
        finally:
            self.health.stopping = True
            if relay is not None:
                relay.close()
            self.store.close()
            self.endpoint.stop()
        return 0
