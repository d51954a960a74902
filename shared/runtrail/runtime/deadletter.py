"""The dead-letter topic: original key, bytes and headers, plus headers naming the error and source.

Dead letters must be durable before the runtime commits past them. :meth:`flush` therefore
raises :class:`StoreUnavailable` while any of them is still undelivered for a reason waiting can
fix (broker down, request timeout): the failed ones are kept and produced again at the next
flush, and the runtime backs off meanwhile without committing. A dead letter the broker refuses
as too large is sent again with its value replaced by a digest (sha256 and size headers, the
reason kept), so no event can make the dead-letter path itself crash. Only errors waiting cannot
fix (authorization, a missing topic) raise :class:`DeadLetterError`, which stops the service.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from runtrail.kafka.client_log import with_client_logger
from runtrail.kafka.producer_config import too_large
from runtrail.kafka.retry import retryable_kafka_error
from runtrail.kafka.topics import max_message_bytes
from runtrail.runtime.unavailable import StoreUnavailable

log = logging.getLogger(__name__)

H_REASON = "rt.error.reason"
H_DETAIL = "rt.error.detail"
H_SERVICE = "rt.error.service"
H_TOPIC = "rt.source.topic"
H_PARTITION = "rt.source.partition"
H_OFFSET = "rt.source.offset"
H_TIMESTAMP = "rt.source.timestamp"
#: Set when the value was replaced by its digest because the dead letter was too large.
H_VALUE_SHA256 = "rt.error.value-sha256"
H_VALUE_SIZE = "rt.error.value-size"
#: Original headers left out because together they exceeded :data:`MAX_COPIED_HEADER_BYTES`.
H_HEADERS_DROPPED = "rt.error.headers-dropped"

MAX_DETAIL_BYTES = 2000
MAX_COPIED_HEADER_BYTES = 64 * 1024

Headers = list[tuple[str, str | bytes | None]]


class DeadLetterError(RuntimeError):
    """A dead letter cannot be delivered and waiting will not help: the service must stop."""


def _bounded_detail(detail: str) -> bytes:
    raw = detail.encode("utf-8", "replace")
    if len(raw) <= MAX_DETAIL_BYTES:
        return raw
    return raw[:MAX_DETAIL_BYTES].decode("utf-8", "ignore").encode()


def _copied_headers(headers: list[tuple[str, Any]] | None) -> Headers:
    """The original headers, as many as fit :data:`MAX_COPIED_HEADER_BYTES` (in order)."""
    if not headers:
        return []
    out: Headers = []
    used = dropped = 0
    for name, value in headers:
        size = len(name) + (len(value) if value is not None else 0)
        if used + size > MAX_COPIED_HEADER_BYTES:
            dropped += 1
            continue
        used += size
        out.append((name, value))
    if dropped:
        out.append((H_HEADERS_DROPPED, str(dropped).encode()))
    return out


def digest_headers(value: bytes | None) -> Headers:
    data = value or b""
    return [
        (H_VALUE_SHA256, hashlib.sha256(data).hexdigest().encode()),
        (H_VALUE_SIZE, str(len(data)).encode()),
    ]


class DeadLetterProducer:
    """Produces dead letters; keeps the undelivered ones for the next :meth:`flush`."""

    def __init__(
        self,
        config: dict[str, Any],
        topic: str,
        service: str,
        *,
        max_event_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.topic = topic
        self.service = service
        self.max_message_bytes = max_message_bytes(max_event_bytes)
        # built by ``dead_letter_config``: the invariants every runtrail producer keeps
        self._producer = Producer(with_client_logger(config))
        self._retry: list[tuple[bytes | None, bytes | None, Headers]] = []
        #: dead letters the broker refused as too large in a batch: each is sent again alone
        #: before its value is replaced by a digest (the others in the batch got the error too)
        self._alone: list[tuple[bytes | None, bytes | None, Headers]] = []
        self._fatal: list[str] = []
        self._last_error = ""
        self.pending = 0
        #: dead letters whose value was replaced by a digest (too large for the topic)
        self.replaced = 0

    def send(
        self,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, Any]] | None,
        source_topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        reason: str,
        detail: str,
        extra: Headers | None = None,
    ) -> None:
        out_headers = _copied_headers(headers)
        out_headers += [
            (H_REASON, reason.encode()),
            (H_DETAIL, _bounded_detail(detail)),
            (H_SERVICE, self.service.encode()),
            (H_TOPIC, source_topic.encode()),
            (H_PARTITION, str(partition).encode()),
            (H_OFFSET, str(offset).encode()),
            (H_TIMESTAMP, str(timestamp_ms).encode()),
        ]
        if extra:
            out_headers += extra
        log.warning(
            "dead-lettering %s[%d]@%d: %s: %s",
            source_topic,
            partition,
            offset,
            reason,
            detail[:500],
        )
        self._produce(key, value, out_headers)
        self._producer.poll(0)

    def _produce(
        self, key: bytes | None, value: bytes | None, headers: Headers, alone: bool = False
    ) -> None:
        if value is not None and len(value) > self.max_message_bytes:
            value, headers = None, headers + digest_headers(value)
            self.replaced += 1
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=headers,
                    # the record itself, not the report's message: delivery reports carry no
                    # headers, and a failed dead letter is produced again as it was
                    on_delivery=functools.partial(self._on_delivery, (key, value, headers), alone),
                )
                break
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                err = exc.args[0]
                if too_large(err) and value is not None:
                    value, headers = None, headers + digest_headers(value)
                    self.replaced += 1
                    continue
                raise
        self.pending += 1

    def _on_delivery(
        self,
        record: tuple[bytes | None, bytes | None, Headers],
        alone: bool,
        err: KafkaError | None,
        msg: Message,
    ) -> None:
        if err is None:
            return
        self._last_error = f"{err.name()}: {err.str()}"
        key, value, headers = record
        if too_large(err) and value is not None and not alone:
            self._alone.append(record)  # maybe only beside the large one: try it alone
        elif too_large(err) and value is not None:
            self.replaced += 1
            self._retry.append((key, None, headers + digest_headers(value)))
        elif retryable_kafka_error(err):
            self._retry.append(record)
        else:
            self._fatal.append(self._last_error)

    def flush(self, timeout: float = 30.0) -> None:
        """Return once every dead letter sent so far is durable; raise while one is not.

        Failed ones are produced again (up to three rounds here, then at the next call), so a
        dead letter refused in a batch, sent alone and replaced by its digest if refused
        again, is usually delivered by the same call.
        """
        for _ in range(3):
            if self._alone:
                self._send_alone(timeout)
            if self._retry:
                retry, self._retry = self._retry, []
                for key, value, headers in retry:
                    self._produce(key, value, headers)
            if self.pending:
                remaining = self._producer.flush(timeout)
                self.pending = remaining
                if remaining:
                    raise StoreUnavailable(
                        f"dead-letter topic {self.topic}",
                        f"{remaining} dead letters still undelivered after {timeout}s "
                        f"({self._last_error or 'no error reported yet'})",
                    )
            if self._fatal:
                fatal, self._fatal = self._fatal, []
                raise DeadLetterError(f"dead letters to {self.topic} failed: {fatal[:3]}")
            if not self._retry and not self._alone:
                return
        raise StoreUnavailable(
            f"dead-letter topic {self.topic}",
            f"{len(self._retry) + len(self._alone)} dead letters failed and will be sent again "
            f"({self._last_error})",
        )

    def _send_alone(self, timeout: float) -> None:
        """Produce each size suspect in a batch of its own (nothing else in flight)."""
        alone, self._alone = self._alone, []
        for position, (key, value, headers) in enumerate(alone):
            if self._producer.flush(timeout):
                self._alone[:0] = alone[position:]  # still in flight: the rest waits
                return
            self._produce(key, value, headers, alone=True)
            self.pending = self._producer.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self._producer.flush(timeout)
