"""A Kafka client refused for its credentials: told once, by broker and mechanism.

Why: a wrong SCRAM password or a certificate the other side does not trust is no outage that
waiting fixes, yet librdkafka retries it forever, logging a line per attempt. This module
recognises such a refusal among the errors a client reports (``error_cb``) and words it as
one sentence naming the broker, the security protocol, the mechanism and the identity, so a
service can stop with it (:class:`~runtrail.runtime.runner.ServiceRunner`, a receiver through
:func:`verify_credentials`), a command can exit with it (:func:`wait_connected`) and every
other client logs it once
(:func:`error_reporter`, the default ``error_cb`` of :meth:`Settings.kafka_config`).

Recognised: ``_AUTHENTICATION`` / ``SASL_AUTHENTICATION_FAILED`` (a SCRAM or PLAIN refusal),
a TLS verification failure of the broker's certificate (``_SSL``), and a TLS alert by which
the broker refuses the client's certificate (reported as ``_TRANSPORT``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from runtrail.kafka.client_log import client_logger

AUTH_LOGGER = "runtrail.kafka.auth"

_REFUSED_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
#: What OpenSSL says when either side does not accept the other's certificate.
_TLS_REFUSAL = re.compile(
    r"certificate verify failed|alert (?:certificate unknown|bad certificate|certificate "
    r"required|unknown ca|certificate expired|certificate revoked|unsupported certificate|"
    r"access denied|decrypt error)",
    re.IGNORECASE,
)
#: ``sasl_ssl://127.0.0.1:9092/bootstrap: `` (or ``…/1: ``) at the start of a message.
_BROKER_PREFIX = re.compile(r"^\s*\w+://(?P<address>[^/\s]+)/\S*:\s*")
_TIMING = re.compile(r"\s*\(after \d+ms in state \w+\)\s*$")


class KafkaAuthError(KafkaException):
    """A client was refused for its credentials; ``str()`` is the one-sentence account."""

    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(error)
        self.error = error
        self.message = message

    def __str__(self) -> str:
        return self.message


def is_auth_failure(err: KafkaError) -> bool:
    """Whether ``err`` says the credentials were refused (no retry will fix it)."""
    if err.code() in _REFUSED_CODES:
        return True
    return err.code() in (KafkaError._SSL, KafkaError._TRANSPORT) and bool(
        _TLS_REFUSAL.search(err.str())
    )


#: The options :func:`describe` reads: none of them a secret.
_NAMING_OPTIONS = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "ssl.certificate.location",
    "ssl.keystore.location",
)


def naming_options(config: Mapping[str, Any]) -> dict[str, str]:
    """What of a client config says where and as whom it connects (no secret), to keep for
    :func:`describe` without keeping the config."""
    named = {k: str(config[k]) for k in _NAMING_OPTIONS if config.get(k)}
    if config.get("ssl.certificate.pem"):
        named["ssl.certificate.pem"] = "(inline)"
    return named


def mechanism_of(config: Mapping[str, Any]) -> str:
    """The security protocol and mechanism a config connects with, and as whom."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).upper()
    parts = [protocol]
    if protocol.startswith("SASL"):
        mechanism = config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI"
        parts.append(str(mechanism).upper())
        if config.get("sasl.username"):
            parts.append(f"as {config['sasl.username']}")
    if protocol.endswith("SSL"):
        certificate = config.get("ssl.certificate.location") or config.get("ssl.keystore.location")
        if certificate:
            parts.append(f"client certificate {certificate}")
        elif config.get("ssl.certificate.pem"):
            parts.append("client certificate (inline PEM)")
        elif protocol == "SSL":
            parts.append("no client certificate")
    return ", ".join(parts)


def describe(err: KafkaError, config: Mapping[str, Any]) -> str:
    """One sentence: which broker refused which identity over which mechanism, and why."""
    text = err.str()
    match = _BROKER_PREFIX.match(text)
    broker = match.group("address") if match else str(config.get("bootstrap.servers", "?"))
    reason = _TIMING.sub("", text[match.end() :] if match else text)
    return (
        f"Kafka broker {broker} refused the connection ({mechanism_of(config)}): {reason}; "
        "check the credentials and the CA (no retry will fix this)"
    )


#: how long one refusal (same broker, mechanism and reason) stays told, for every client of
#: the process: a service's consumer, producers and admin client all meet the same refusal
TOLD_FOR_S = 60.0
_told: dict[str, float] = {}
_told_lock = threading.Lock()


def _first_telling(text: str) -> bool:
    now = time.monotonic()
    with _told_lock:
        last = _told.get(text)
        if last is not None and now - last < TOLD_FOR_S:
            return False
        _told[text] = now
        return True


def error_reporter(config: Mapping[str, Any]) -> Callable[[KafkaError], None]:
    """An ``error_cb`` that logs a refusal of ``config``'s credentials once per broker and
    reason for the whole process (again after :data:`TOLD_FOR_S`); other errors stay
    librdkafka's."""
    logger = client_logger(AUTH_LOGGER)

    def report(err: KafkaError) -> None:
        if is_auth_failure(err):
            text = describe(err, naming_options(config))
            if _first_telling(text):
                logger.error("%s", text)

    return report


class AuthWatch:
    """An ``error_cb`` that remembers the first refusal of the credentials, for a caller that
    waits on a client (:func:`wait_connected`) and must not wait out its whole timeout."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = naming_options(config)
        self.failure: KafkaAuthError | None = None

    def __call__(self, err: KafkaError) -> None:
        if self.failure is None and is_auth_failure(err):
            self.failure = KafkaAuthError(err, describe(err, self._config))


def verify_credentials(config: Mapping[str, Any], timeout: float) -> None:
    """Connect once with ``config`` before a client whose first call blocks long (the relay's
    ``init_transactions``): a refusal raises :class:`KafkaAuthError` within about a second, an
    unreachable cluster ``KafkaException`` at ``timeout``."""
    from runtrail.kafka.admin import admin_client

    probe = {k: v for k, v in config.items() if not k.startswith("transactional.")}
    watch = AuthWatch(probe)
    probe["error_cb"] = watch
    wait_connected(admin_client(probe), watch, timeout)


def wait_connected(admin: Any, watch: AuthWatch, timeout: float) -> None:
    """Block until ``admin`` reads the cluster metadata; raise the refusal ``watch`` saw as
    soon as it sees one, or the last error at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            if watch.failure is not None:
                raise watch.failure from None
            if time.monotonic() >= deadline:
                raise exc


__all__ = [
    "AuthWatch",
    "KafkaAuthError",
    "describe",
    "error_reporter",
    "is_auth_failure",
    "mechanism_of",
    "naming_options",
    "verify_credentials",
    "wait_connected",
]
