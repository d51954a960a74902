"""Which Kafka errors waiting can fix, and how long to wait between tries.

Shared by every producer and consumer runtrail runs (the publisher in an agent, the services'
runtime, dead letters, output topics), so it imports nothing but the Kafka client: the core
install (an agent with the publisher alone) has it.
"""

from __future__ import annotations

import random

from confluent_kafka import KafkaError

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


class Backoff:
    """Bounded exponential backoff with jitter: 0.5 s, 1 s, 2 s … up to 30 s."""

    def __init__(self, initial_s: float = BACKOFF_INITIAL_S, max_s: float = BACKOFF_MAX_S) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.attempts = 0

    def delay(self) -> float:
        """The wait before the next try, jittered (so many clients do not retry in step)."""
        delay = min(self.max_s, self.initial_s * (2 ** min(self.attempts, 16)))
        return float(delay * random.uniform(0.8, 1.0))

    def grow(self) -> None:
        """One more failed try: the next wait doubles, up to ``max_s``."""
        self.attempts += 1

    def next_delay(self) -> float:
        """The wait before the next try, counting this one as failed."""
        delay = self.delay()
        self.grow()
        return delay

    def reset(self) -> None:
        self.attempts = 0
