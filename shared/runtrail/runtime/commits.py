"""Offset commits with a time bound: one asynchronous request in flight, its result awaited.

Why: a synchronous ``commit()`` that is in flight when the broker dies waits for the group
coordinator with no bound (inside librdkafka's ``rd_kafka_commit_queue``), so the consume
loop stops turning and SIGTERM's Python handler never runs. (It cannot simply move to a
thread: confluent-kafka serializes the calls on one handle, so ``consume()`` would wait for
it.) Here each commit is asynchronous; its result comes to :meth:`Committer.on_commit`,
served by ``consume()``; no result within the bound is a retryable failure (see
:mod:`.retry`): nothing is taken as committed.

Correctness rules this module keeps:

- at most one request is in flight: the next one is sent only once the previous result
  came, so Kafka can never get an older offset after a newer one from this process (the
  revoke path may send one behind a request still within its bound; the client sends both
  to the coordinator in order; never behind one of this assignment that timed out; one from
  before a rebalance that timed out is given up, since partitions lost with it in flight may
  never bring its result, and if it lands late it only moves the group back);
- a result confirms exactly the offsets of *its* request (a late success for an older
  position is never taken for a newer one, and a result whose offsets are not the request's
  confirms nothing); the caller compares the request's assignment generation, so a result
  arriving after the partitions were given up confirms nothing either.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)


class CommitTimedOut(KafkaException):
    """No result for a commit within its bound (retryable: ``_TIMED_OUT``)."""

    def __init__(self, waited_s: float, offsets: list[TopicPartition]) -> None:
        parts = ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in offsets)
        super().__init__(
            KafkaError(
                KafkaError._TIMED_OUT,
                f"offset commit of {parts or 'nothing'}: no result from the group "
                f"coordinator within {waited_s:.1f}s",
            )
        )


@dataclass(eq=False)
class CommitRequest:
    """One commit: its offsets, the assignment generation it was made in, its result."""

    offsets: list[TopicPartition]
    generation: int
    sent_at: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    error: KafkaException | None = None

    def points(self) -> set[tuple[str, int, int]]:
        return {(o.topic, o.partition, o.offset) for o in self.offsets}


class Committer:
    """Sends asynchronous commits and matches each result to its request, in order."""

    def __init__(self, name: str) -> None:
        self._name = name
        #: the requests sent whose results the runner has not taken yet, oldest first
        self.requests: deque[CommitRequest] = deque()

    def submit(
        self, consumer: Consumer, offsets: list[TopicPartition], generation: int
    ) -> CommitRequest:
        """Send one commit. The caller sends a new one only once the previous results were
        taken (the revoke path excepted, behind a request still within its bound: the
        client sends both to the coordinator in order)."""
        request = CommitRequest(list(offsets), generation)
        consumer.commit(offsets=request.offsets, asynchronous=True)
        self.requests.append(request)
        return request

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The client's ``on_commit`` callback (called from inside ``consume()``/``close()``):
        the result of the oldest open request with exactly these offsets."""
        got = {(p.topic, p.partition, p.offset) for p in partitions}
        open_ = [r for r in self.requests if not r.done.is_set()]
        request = next((r for r in open_ if r.points() == got), None)
        if request is None and not got and open_:
            request = open_[0]
        if request is None:
            log.warning("%s: a commit result matching no request in flight: %s", self._name, got)
            return
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            request.error = KafkaException(err)
        else:
            failed = next((p.error for p in partitions if p.error is not None), None)
            if failed is not None:
                request.error = KafkaException(failed)
        request.done.set()

    def wait(
        self,
        request: CommitRequest,
        timeout_s: float,
        give_up: Callable[[], bool],
        serve: Callable[[float], None],
    ) -> bool:
        """Serve the client (``serve(seconds)`` calls ``consume()``) until the request's
        result came or ``timeout_s`` passed; a stop request (``give_up()``) ends the wait
        after about a second. True when the result came."""
        deadline = time.monotonic() + timeout_s
        patience = time.monotonic() + _STOP_GRACE_S
        while not request.done.is_set():
            now = time.monotonic()
            if now >= deadline or (now >= patience and give_up()):
                return False
            serve(min(_SLICE_S, deadline - now))
        return True


#: how long one serve call may take, and how long a commit gets once stop is asked
_SLICE_S = 0.2
_STOP_GRACE_S = 1.0
