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

from confluent_kafka import KafkaException
from prometheus_client import Counter, Gauge

from runtrail.commands.relay import OutboxRelay
from runtrail.kafka.auth import KafkaAuthError, verify_credentials
from runtrail.kafka.producer_config import producer_config
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import redact_url
from runtrail.runtime.receiver import Receiver
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail_services.outbox_relay.settings import OutboxRelaySettings

#: How long the relay waits for the cluster before a (re)build counts as failed and is retried.
CONNECT_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class OutboxRelayReceiver(Receiver[OutboxRelaySettings]):
    """One relay process; :meth:`run` relays until :meth:`request_stop`."""

    name = "outbox-relay"
    default_port = 9470
    own_settings = OutboxRelaySettings

    def open(self) -> None:
        self.store = open_store(COMMAND_EVENTS, self.own.resolved_store(self.settings.state_dir))
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
        self.relay: OutboxRelay | None = None

    def _relay(self) -> OutboxRelay:
        # init_transactions would wait out its whole timeout on refused credentials
        verify_credentials(self.settings.kafka_config(), CONNECT_TIMEOUT_S)
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

    def start(self) -> None:
        log.info(
            "outbox-relay (pid %d): %s -> %s; metrics on %s:%d",
            os.getpid(),
            redact_url(self.own.resolved_store(self.settings.state_dir)),
            self.settings.events_topic,
            self.settings.metrics_host,
            self.endpoint.port,
        )

    def serve(self) -> None:
        """Relay until stopped; a Kafka or store error drops the relay, rebuilt after a pause."""
        while not self._stop.is_set():
            self.health.beat()
            try:
                if self.relay is None:
                    self.relay = self._relay()
                    self.health.ready = True
                sent = self.relay.pump()
            except (KafkaException, StoreUnavailable) as exc:
                if isinstance(exc, KafkaAuthError):
                    raise  # no rebuild can fix it: the receiver stops, saying why
                log.warning("outbox-relay: %s; rebuilding in %.1fs", exc, self.own.retry_s)
                self.health.ready = False
                self.relay = None
                self._stop.wait(self.own.retry_s)
                continue
            self.published.inc(sent)
            self.pending.set(self.store.outbox_size() if sent else 0)
            if not sent:
                self._stop.wait(self.own.idle_poll_s)

    def shut_down(self) -> None:
        if self.relay is not None:
            self.relay.close()
        self.store.close()
