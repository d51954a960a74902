"""Recognising a Kafka producer that a fatal error has ended.

librdkafka raises a fatal error once, e.g. for an idempotent producer that lost its state, or
one that reached a broker still starting up and could not learn its features ("Idempotent
producer not supported by any of the connected brokers"). confluent-kafka never passes it to
``error_cb``: the ``poll`` or ``flush`` that meets it raises it, as a ``KafkaException`` or,
when a Python callback ran while it was pending, as a ``SystemError``: caused by it, or, when
that callback cleared it (the client's log callback, logging the fatal error, does), "returned
NULL without setting an exception" with no trace of it at all. After it every ``produce``
raises ``_FATAL`` and what was queued is purged. Such a client never works
again: its owner replaces it (the publisher's sender, the output topics, the dead letters), and
sends again every record the old one still held; ``tests/test_producer_fatal.py`` provokes the
real error against a real broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException


class _Client(Protocol):
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...


#: told the fatal error, once per client; the client is to be replaced
Ended = Callable[[KafkaError], Any]

#: how far down ``__cause__``/``__context__`` a fatal error is looked for
_DEPTH = 4


def is_fatal(err: KafkaError) -> bool:
    """Whether ``err`` says the client is finished (the fatal error, or a call refused after it)."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def fatal_error(exc: BaseException) -> KafkaError | None:
    """The fatal client error ``exc`` (raised by a client's call) stands for, or None when it is
    some other exception. A ``SystemError`` with no fatal error behind it is the client failing
    inside its own call: it is not trusted again either."""
    seen: BaseException | None = exc
    for _ in range(_DEPTH):
        if seen is None:
            break
        if isinstance(seen, KafkaException) and seen.args:
            err = seen.args[0]
            if isinstance(err, KafkaError) and is_fatal(err):
                return err
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, SystemError):
        return KafkaError(
            KafkaError._FATAL, f"the Kafka client failed in its call: {exc}", fatal=True
        )
    return None


def poll_through(client: _Client, timeout_s: float, ended: Ended) -> None:
    """``client.poll(timeout_s)``; its fatal error goes to ``ended`` instead of the caller."""
    try:
        client.poll(timeout_s)
    except Exception as exc:
        err = fatal_error(exc)
        if err is None:
            raise
        ended(err)


def flush_through(client: _Client, timeout_s: float, ended: Ended) -> int:
    """``client.flush(timeout_s)``: how many records are still in flight. Its fatal error goes
    to ``ended``, and a second, short flush serves the reports of what the client purged
    (each record it held reported failed, to be sent again by its successor)."""
    try:
        return int(client.flush(timeout_s))
    except Exception as exc:
        err = fatal_error(exc)
        if err is None:
            raise
        ended(err)
    return int(client.flush(min(timeout_s, 1.0)))


__all__ = ["Ended", "fatal_error", "flush_through", "is_fatal", "poll_through"]
