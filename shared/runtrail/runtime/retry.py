"""Which failures the runtime waits out (the Kafka codes and the backoff: :mod:`runtrail.kafka.retry`).

Why: a broker restart, a coordinator move or a full disk is not a reason to stop a service;
Kubernetes would only restart it into the same outage, and an exit loses the readiness signal
operators watch. Such failures are *retryable*: the runtime reports not ready, commits nothing,
backs off and tries again. Everything else (authentication, authorization, configuration)
is *fatal* and stops the service with the error, because waiting cannot fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from runtrail.kafka.retry import retryable_kafka_error
from runtrail.runtime.unavailable import StoreUnavailable


@dataclass(frozen=True, slots=True)
class Problem:
    """A retryable failure: which output or link failed, and the error text."""

    what: str
    detail: str


def classify(exc: BaseException) -> Problem | None:
    """The :class:`Problem` a retryable exception stands for, or None when it is fatal."""
    if isinstance(exc, StoreUnavailable):
        return Problem(exc.what, exc.detail)
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        if retryable_kafka_error(err):
            return Problem("kafka", f"{err.name()}: {err.str()}")
    return None
