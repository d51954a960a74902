"""An in-memory stand-in for ``confluent_kafka.Producer`` to unit-test publisher logic.

``mode`` decides what ``poll`` does with queued messages: ``up`` acknowledges them, ``down``
fails them (as if ``message.timeout.ms`` had passed), ``hold`` leaves them in flight.
``fail(i)`` / ``ack(i)`` settle one queued message out of order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException

DeliveryCallback = Callable[[KafkaError | None, Any], None]


@dataclass
class Sent:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    partition: int
    offset: int


@dataclass
class _Queued:
    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]
    callback: DeliveryCallback | None
    error: int | None = None  # set when purged


class _Msg:
    """What a delivery report carries, as ``confluent_kafka.Message`` does."""

    def __init__(
        self, partition: int | None, offset: int | None, key: bytes | None, value: bytes | None
    ) -> None:
        self._partition, self._offset = partition, offset
        self._key, self._value = key, value

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset


class FakeProducer:
    def __init__(self, config: dict[str, Any] | None = None, mode: str = "up") -> None:
        self.config = config or {}
        self.mode = mode
        self.queue: list[_Queued] = []
        self.log: list[Sent] = []
        self.produce_calls = 0
        self.buffer_limit: int | None = None
        self.max_value: int | None = None
        self.raise_on_produce: KafkaException | None = None
        self._next_offset = 0
        self._lock = threading.RLock()

    # --- the Producer API used by the publisher -----------------------------------------
    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        on_delivery: DeliveryCallback | None = None,
        **_: Any,
    ) -> None:
        with self._lock:
            self.produce_calls += 1
            if self.raise_on_produce is not None:
                raise self.raise_on_produce
            if self.max_value is not None and value is not None and len(value) > self.max_value:
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
            if self.buffer_limit is not None and len(self.queue) >= self.buffer_limit:
                raise BufferError("Local: Queue full")
            self.queue.append(_Queued(topic, key, value or b"", list(headers or []), on_delivery))

    def poll(self, timeout: float = 0) -> int:
        with self._lock:
            if self.mode == "hold":
                ready = [q for q in self.queue if q.error is not None]
            else:
                ready = list(self.queue)
            for q in ready:
                self.queue.remove(q)
        for q in ready:
            self._report(q, q.error if q.error is not None else self._verdict())
        if not ready and timeout:
            threading.Event().wait(min(timeout, 0.01))
        return len(ready)

    def flush(self, timeout: float = 0) -> int:
        deadline = threading.Event()
        waited = 0.0
        while True:
            self.poll(0)
            with self._lock:
                if not self.queue or waited >= timeout:
                    return len(self.queue)
            deadline.wait(0.01)
            waited += 0.01

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        with self._lock:
            for q in self.queue:
                q.error = KafkaError._PURGE_QUEUE

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object:
        if self.mode != "up":
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return object()

    # --- test controls -------------------------------------------------------------------
    def settle(self, index: int, ok: bool) -> None:
        """Report the queued message at ``index`` now (out of order)."""
        with self._lock:
            q = self.queue.pop(index)
        self._report(q, None if ok else KafkaError._MSG_TIMED_OUT)

    def _verdict(self) -> int | None:
        return None if self.mode == "up" else KafkaError._MSG_TIMED_OUT

    def _report(self, q: _Queued, error: int | None) -> None:
        if error is None:
            with self._lock:
                offset = self._next_offset
                self._next_offset += 1
                self.log.append(Sent(q.topic, q.key, q.value, q.headers, 0, offset))
            msg = _Msg(0, offset, q.key, q.value)
            err = None
        else:
            msg, err = _Msg(None, None, q.key, q.value), KafkaError(error)
        if q.callback is not None:
            q.callback(err, msg)
