"""Recognising a Kafka producer that a fatal error has ended.

librdkafka raises a fatal error once, e.g. for an idempotent producer that lost its state, or
one that reached a broker still starting up and could not learn its features ("Idempotent
producer not supported by any of the connected brokers"). confluent-kafka never passes it to
``error_cb``: the ``poll`` or ``flush`` that meets it raises it, as a ``KafkaException`` or,
when a delivery callback ran while it was pending, as a ``SystemError`` caused by one. After it
every ``produce`` raises ``_FATAL`` and what was queued is purged. Such a client never works
again: its owner replaces it (the publisher's sender, :class:`~runtrail.kafka.output_topic.
OutputTopic`); ``tests/test_producer_fatal.py`` provokes the real error against a real broker.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

#: how far down ``__cause__``/``__context__`` a fatal error is looked for
_DEPTH = 4


def is_fatal(err: KafkaError) -> bool:
    """Whether ``err`` says the client is finished (the fatal error, or a call refused after it)."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def fatal_error(exc: BaseException) -> KafkaError | None:
    """The fatal client error ``exc`` stands for, or None when it is some other exception."""
    seen: BaseException | None = exc
    for _ in range(_DEPTH):
        if seen is None:
            break
        if isinstance(seen, KafkaException) and seen.args:
            err = seen.args[0]
            if isinstance(err, KafkaError) and is_fatal(err):
                return err
        seen = seen.__cause__ or seen.__context__
    return None


__all__ = ["fatal_error", "is_fatal"]
