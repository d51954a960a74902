"""librdkafka configuration of every runtrail producer, and the one set each of size errors and
of purge reports.

The publisher, the output topics (:mod:`runtrail.kafka.output_topic`) and the dead letters
(:mod:`runtrail.runtime.deadletter`) build their config here, so each gets the invariants.

Three settings are invariants, not tuning, and win over ``kafka_options``:

* ``enable.idempotence=true`` and ``acks=all`` — librdkafka leaves idempotence off, and
  without it a retried batch can be written twice or reordered, which breaks per-run order;
* ``partitioner=murmur2_random`` — the Java client's default, so a run's events land on the
  same partition whichever language produced them (librdkafka's default is CRC32);
* ``message.timeout.ms`` is a backstop only (several times ``delivery_timeout_ms``): the
  publisher times deliveries out itself, all at once, because librdkafka's per-message timeout
  fails the oldest events while later ones of the same run still get through;
* ``message.max.bytes`` leaves room for an event of ``max_event_bytes`` plus headers, so a legal
  event is never refused by the client;
* ``compression.type`` / ``linger.ms`` come from their own :class:`~runtrail.config.Settings`
  fields.

Everything else in ``settings.kafka_options`` (SASL, TLS, client.id…) passes through, and may
override the batching defaults below.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError

from runtrail.config import Settings
from runtrail.kafka.topics import max_message_bytes

log = logging.getLogger(__name__)

#: What the client or the broker answers for a record, or the batch it went in, too large for
#: the topic. A batch refused as too large gets the error for every record in it, so each
#: producer sends such a record again alone before it judges it.
SIZE_ERRORS: frozenset[int] = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_MSG_SIZE}
)


def too_large(err: KafkaError) -> bool:
    """Whether ``err`` says the record (or its batch) is too large for the topic."""
    return err.code() in SIZE_ERRORS


#: What a purge reports for each record it took back: nothing failed, it is to be sent again.
PURGE_REPORTS: frozenset[int] = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})


def purged(err: KafkaError) -> bool:
    """Whether ``err`` reports a record a purge took back (a timeout's, or a fatal error's)."""
    return err.code() in PURGE_REPORTS


#: Batching and buffering defaults; ``kafka_options`` may override them.
TUNING_DEFAULTS: dict[str, Any] = {
    "client.id": "runtrail-publisher",
    "batch.num.messages": 10_000,
    "batch.size": 1_048_576,
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 262_144,
}


#: Room for the Kafka headers and record overhead on top of the largest legal event.
HEADER_ROOM_BYTES = 256 * 1024


def backstop_timeout_ms(settings: Settings) -> int:
    """librdkafka's own per-message timeout: well after the publisher's, so it never fires first."""
    return 3 * settings.delivery_timeout_ms + 10_000


def invariants(settings: Settings) -> dict[str, Any]:
    """The options the publisher's guarantees rest on."""
    return {
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "message.timeout.ms": backstop_timeout_ms(settings),
        "message.max.bytes": max(1_000_000, settings.max_event_bytes + HEADER_ROOM_BYTES),
        "compression.type": settings.compression,
        "linger.ms": settings.linger_ms,
    }


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """Producer config: bootstrap + defaults + passthrough options + invariants + overrides."""
    config: dict[str, Any] = dict(TUNING_DEFAULTS)
    config.update(settings.kafka_config())
    for key, value in invariants(settings).items():
        given = config.get(key)
        if given is not None and str(given).lower() != str(value).lower():
            log.warning("kafka option %s=%s ignored: the publisher needs %s", key, given, value)
        config[key] = value
    config.update(overrides)
    return config


def dead_letter_config(
    settings: Settings, max_event_bytes: int, **overrides: Any
) -> dict[str, Any]:
    """Dead letters: the invariants, room for the largest legal event and what a dead letter
    adds to it, and a short linger (dead letters are rare; each batch waits on them)."""
    return producer_config(
        settings,
        **{
            "client.id": "runtrail-dead-letters",
            "linger.ms": 5,
            "message.max.bytes": max_message_bytes(max_event_bytes),
            **overrides,
        },
    )
