"""Which failures the runtime waits out and which stop it; the backoff's bounds (no broker)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtrail.kafka.retry import BACKOFF_MAX_S, Backoff
from runtrail.runtime.deadletter import DeadLetterError
from runtrail.runtime.retry import classify
from runtrail.runtime.unavailable import StoreUnavailable


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._WAIT_COORD,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
    ],
)
def test_coordinator_and_transport_errors_are_waited_out(code: int) -> None:
    problem = classify(KafkaException(KafkaError(code)))
    assert problem is not None and problem.what == "kafka"
    assert KafkaError(code).name() in problem.detail


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._INVALID_ARG,
    ],
)
def test_authorization_and_configuration_errors_stop_the_service(code: int) -> None:
    assert classify(KafkaException(KafkaError(code))) is None


def test_a_fatal_client_error_stops_even_with_a_retryable_code() -> None:
    fatal = KafkaError(KafkaError._TRANSPORT, "fenced", fatal=True)
    assert classify(KafkaException(fatal)) is None


def test_store_unavailable_names_what_failed_and_other_errors_are_fatal() -> None:
    problem = classify(StoreUnavailable("capture sink file:///x", "No space left on device"))
    assert problem is not None
    assert (problem.what, problem.detail) == ("capture sink file:///x", "No space left on device")
    assert classify(DeadLetterError("topic does not exist")) is None
    assert classify(ValueError("a bug")) is None


def test_backoff_grows_exponentially_and_stays_bounded() -> None:
    backoff = Backoff()
    delays = [backoff.next_delay() for _ in range(12)]
    assert 0.4 <= delays[0] <= 0.5
    assert delays[3] > delays[1] > delays[0]
    assert max(delays) <= BACKOFF_MAX_S and delays[-1] >= 0.8 * BACKOFF_MAX_S
    backoff.reset()
    assert backoff.next_delay() <= 0.5
