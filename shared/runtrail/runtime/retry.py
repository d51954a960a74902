"""Which failures the runtime waits out, and how long it waits between tries.

Why: a broker restart, a coordinator move or a full disk is not a reason to stop a service;
Kubernetes would only restart it into the same outage, and an exit loses the readiness signal
operators watch. Such failures are *retryable*: the runtime reports not ready, commits nothing,
backs off and tries again. Everything else (authentication, authorization, configuration)
is *fatal* and stops the service with the error, because waiting cannot fix it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from runtrail.runtime.unavailable import StoreUnavailable

#: librdkafka/Kafka codes that mean "the cluster or the group is not reachable right now".
RETRYABLE_CODES = frozenset(
    {
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._WAIT_CACHE,
        KafkaError._IN_PROGRESS,
        KafkaError._RETRY,
        KafkaError._STATE,
        KafkaError._ASSIGNMENT_LOST,
        KafkaError._MAX_POLL_EXCEEDED,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)

BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 30.0


def retryable_kafka_error(err: KafkaError) -> bool:
    """True for errors that waiting can fix (fatal and authorization errors never are)."""
    if err.fatal():
        return False
    return err.code() in RETRYABLE_CODES or bool(err.retriable())


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


class Backoff:
    """Bounded exponential backoff with jitter: 0.5 s, 1 s, 2 s … up to 30 s."""

    def __init__(self, initial_s: float = BACKOFF_INITIAL_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.attempts = 0

    def next_delay(self) -> float:
        delay = min(self.max_s, self.initial_s * (2 ** min(self.attempts, 16)))
        self.attempts += 1
        return float(delay * random.uniform(0.8, 1.0))

    def reset(self) -> None:
        self.attempts = 0
