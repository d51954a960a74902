"""The dead-letter topic: original key, bytes and headers, plus headers naming the error and source.

Dead letters must be durable before the runtime commits past them. :meth:`flush` therefore
raises :class:`StoreUnavailable` while any of them is still undelivered for a reason waiting can
fix (broker down, request timeout): the failed ones are kept and produced again at the next
flush, and the runtime backs off meanwhile without committing (the producer core all runtrail
producers share, :mod:`runtrail.kafka.unacked`, keeps them). A dead letter the broker refuses as
too large, alone and not merely inside a refused batch, is sent again with its value replaced by
a digest (sha256 and size headers, the reason kept), so no event can make the dead-letter path
itself crash. A producer that a fatal error ended (:mod:`runtrail.kafka.fatal`) is replaced at
the next flush, and what it held is sent again by its successor. Only errors waiting cannot
fix (authorization, a missing topic) raise :class:`DeadLetterError`, which stops the service.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from runtrail.kafka.client_log import with_client_logger
from runtrail.kafka.fatal import flush_through, is_fatal, poll_through
from runtrail.kafka.producer_config import purged, too_large
from runtrail.kafka.retry import retryable_kafka_error
from runtrail.kafka.topics import max_message_bytes
from runtrail.kafka.unacked import Unacked, resend
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
#: a dead letter as produced: key, value (None once replaced by its digest) and headers
DeadLetter = tuple[bytes | None, bytes | None, Headers]


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
        producer_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.topic = topic
        self.service = service
        self.max_message_bytes = max_message_bytes(max_event_bytes)
        # built by ``dead_letter_config``: the invariants every runtrail producer keeps
        self._config = with_client_logger(config)
        self._factory = producer_factory or Producer
        self._producer = self._factory(self._config)
        #: why the producer must be replaced before the next resend (None: it need not)
        self._renew: str | None = None
        #: every dead letter produced and not yet acknowledged; the failed ones are produced
        #: again at the next :meth:`flush`
        self._unacked: Unacked[DeadLetter] = Unacked()
        self._fatal: list[str] = []
        self._last_error = ""
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
        rid, now = self._unacked.add(self._fitted(key, value, out_headers))
        if now:
            self._produce(rid)
        poll_through(self._producer, 0, self._ended)

    @property
    def pending(self) -> int:
        """Dead letters produced and not yet acknowledged."""
        return len(self._unacked)

    def _fitted(self, key: bytes | None, value: bytes | None, headers: Headers) -> DeadLetter:
        """The dead letter, its value replaced by a digest when it cannot fit the topic."""
        if value is not None and len(value) > self.max_message_bytes:
            return self._digest_of((key, value, headers))
        return key, value, headers

    def _digest_of(self, record: DeadLetter) -> DeadLetter:
        key, value, headers = record
        self.replaced += 1
        return key, None, headers + digest_headers(value)

    def _produce(self, rid: int) -> None:
        """Hand dead letter ``rid`` to the client; an error waiting cannot fix raises (and the
        dead letter is no longer kept: the service stops)."""
        while True:
            key, value, headers = self._unacked.records[rid]
            try:
                self._producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=functools.partial(self._on_delivery, rid),
                )
                return
            except BufferError:
                poll_through(self._producer, 0.1, self._ended)
            except KafkaException as exc:
                err = exc.args[0]
                if too_large(err) and value is not None:
                    self._unacked.records[rid] = self._digest_of((key, value, headers))
                    continue
                if is_fatal(err):  # kept: the next flush's new producer sends it
                    self._ended(err)
                    self._unacked.fail(rid)
                    return
                self._unacked.drop(rid)
                raise

    def _ended(self, err: KafkaError) -> None:
        """A fatal error ended the producer: it is replaced before the next resend."""
        if self._renew is None:
            log.error("dead-letter topic %s: fatal Kafka client error: %s", self.topic, err.str())
        self._last_error = f"{err.name()}: {err.str()}"
        self._renew = self._renew or err.str()
        self._unacked.fail_all()

    def _flush(self, timeout: float) -> int:
        return flush_through(self._producer, timeout, self._ended)

    def _on_delivery(self, rid: int, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self._unacked.acked(rid)
            return
        self._last_error = f"{err.name()}: {err.str()}"
        record = self._unacked.records.get(rid)
        if record is None:
            return
        if too_large(err) and not self._unacked.refused_too_large(rid):
            return  # maybe refused only beside a large one: sent again alone
        if too_large(err) and record[1] is not None:  # refused alone: send its digest
            self._unacked.records[rid] = self._digest_of(record)
            self._unacked.fail(rid)
        elif retryable_kafka_error(err) or purged(err) or is_fatal(err):
            self._unacked.fail(rid)  # purged: only a fatal error purges this producer
        else:
            self._unacked.drop(rid)
            self._fatal.append(self._last_error)

    def flush(self, timeout: float = 30.0) -> None:
        """Return once every dead letter sent so far is durable; raise while one is not.

        Failed ones are produced again (up to three rounds here, then at the next call), so a
        dead letter refused in a batch, sent alone and replaced by its digest if refused
        again, is usually delivered by the same call.
        """
        for _ in range(3):
            if self._unacked.failed:
                self._renewed()
                resend(self._unacked, self._produce, self._flush, timeout)
            remaining = self._flush(timeout)
            if remaining:
                raise StoreUnavailable(
                    f"dead-letter topic {self.topic}",
                    f"{remaining} dead letters still undelivered after {timeout}s "
                    f"({self._last_error or 'no error reported yet'})",
                )
            self._unacked.drained()
            if self._fatal:
                fatal, self._fatal = self._fatal, []
                raise DeadLetterError(f"dead letters to {self.topic} failed: {fatal[:3]}")
            if not self._unacked.failed:
                return
        raise StoreUnavailable(
            f"dead-letter topic {self.topic}",
            f"{self._unacked.failed} dead letters failed and will be sent again "
            f"({self._last_error})",
        )

    def _renewed(self) -> None:
        """A new producer in place of one a fatal error ended, once the old one's last
        reports are served (it purged what it held: each is failed, to be sent again)."""
        if self._renew is None:
            return
        self._flush(1.0)
        log.warning("dead-letter topic %s: %s; starting a new producer", self.topic, self._renew)
        self._producer = self._factory(self._config)
        self._renew = None

    def close(self, timeout: float = 5.0) -> None:
        self._flush(timeout)
