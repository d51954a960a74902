"""The commit procedure of a service runner: everything from a flush to confirmed offsets.

Why one object: the :class:`~runtrail.runtime.checkpoint.Checkpoint` decides *what* may be
committed for each partition; this decides *when and how*, in one place (as Quix Streams'
``Checkpoint.commit()`` does):

1. the outputs are made durable first, in a fixed order: the service's own
   (``Service.flush``), then a cheap garbage collection of the flushed work, then the dead
   letters;
2. the results of the requests already in flight are taken, oldest first (at most one is in
   flight: Kafka must never get an older offset after a newer one from this process); a
   result confirms exactly the offsets of its request, and only in the assignment generation
   it was sent in;
3. what the checkpoint says is due is sent as one asynchronous request, awaited when the
   caller gives a time (a retry, the final commit);
4. a request from before a rebalance with no result in its bound is given up (partitions lost
   with it in flight may never bring one);
5. partitions lost while their commit could not be made restart after what this process made
   durable, not at the group's stale commit.

The runner keeps the loop, the rebalance callbacks and the shutdown; it calls :meth:`commit`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.runtime.checkpoint import Checkpoint
from runtrail.runtime.commits import CommitRequest, Committer, CommitTimedOut
from runtrail.runtime.delivery import Partition
from runtrail.runtime.http import HealthState
from runtrail.runtime.metrics import RuntimeMetrics

log = logging.getLogger(__name__)

#: What the group coordinator answers a commit sent while the group rebalances: the member's
#: generation is changing under it. With incremental (cooperative) assignment a member keeps
#: its other partitions through a rebalance and its loop's commits meet this (librdkafka
#: #4059); as Java's ``RebalanceInProgressException`` says, the commit is to be made again
#: once the rebalance is done. Not an outage: the offsets stay due and the next commit takes
#: them, or the revoke's when the partitions go. Past the commit bound it is one (see
#: :meth:`CommitProcedure._refused_in_rebalance`).
REFUSED_IN_REBALANCE = frozenset({KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION})

#: how long a commit waits for the dead letters to be delivered
DLQ_FLUSH_S = 30.0
#: the same while waiting out a failure or stopping: a short wait keeps within the bounds
DLQ_RETRY_FLUSH_S = 5.0


@dataclass(eq=False)
class CommitProcedure:
    """One runner's commits: flush order, requests in flight, generations, restart points."""

    name: str
    settings: Settings
    checkpoint: Checkpoint
    metrics: RuntimeMetrics
    health: HealthState
    _: KW_ONLY
    #: the outputs made durable before a commit, in this order (see the module docstring)
    flush_service: Callable[[], None]
    after_flush: Callable[[], None]
    flush_dead_letters: Callable[[float], None]
    #: the runner's endpoint and stop state, kept answering while a commit waits
    serve: Callable[[float, bool], None]
    waiting_out: Callable[[], bool]
    stopping: Callable[[], bool]
    _committer: Committer = field(init=False)
    _last_commit: float = field(default_factory=time.monotonic, init=False)
    #: when commits began to be refused because the group rebalances (None: the last was not)
    _refused_since: float | None = field(default=None, init=False)
    #: bumped whenever partitions are given up: a commit result from an older
    #: generation confirms nothing (its partitions may belong to someone else now)
    generation: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._committer = Committer(self.name)

    # --- what the runner asks ---------------------------------------------------------------
    @property
    def requests(self) -> int:
        """How many requests are in flight (their results not taken yet)."""
        return len(self._committer.requests)

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The client's ``on_commit`` callback."""
        self._committer.on_commit(err, partitions)

    def given_up(self) -> None:
        """Partitions were revoked or lost: results of earlier requests confirm nothing (and
        a refusal during the rebalance that ends here does not count toward a later one's
        bound)."""
        self.generation += 1
        self._refused_since = None

    def bound(self) -> float:
        """How long a commit may go without a result before it is a failure."""
        return min(self.settings.commit_timeout_s, self.settings.shutdown_timeout_s)

    # --- the sequence ---------------------------------------------------------------------------
    def commit(
        self,
        consumer: Consumer,
        *,
        force: bool = False,
        only: set[Partition] | None = None,
        wait_s: float | None = None,
        keep_messages: bool = True,
    ) -> None:
        """Flush, then commit what is durable, asynchronously: one request in flight at a
        time, its result taken before the next is sent.

        Without ``wait_s`` (the loop, the revoke path) a request still in flight within its
        bound makes this a no-op until a later turn; past its bound it raises
        :class:`CommitTimedOut`. With ``wait_s`` (a retry, the final commit) the client is
        served until the result came, at most that long, or it raises."""
        now = time.monotonic()
        if not force and (now - self._last_commit) * 1000 < self.settings.commit_interval_ms:
            return
        self._last_commit = now
        with self.metrics.commit_seconds.time():
            if not self.finish(wait_s, keep_messages, revoking=only is not None):
                return  # still in flight, within its bound: a later turn looks again
            self.flush_service()
            self.checkpoint.flushed()
            self.after_flush()  # the flushed work is gone: a cheap collection now
            short = self.waiting_out() or self.stopping()
            self.flush_dead_letters(DLQ_RETRY_FLUSH_S if short else DLQ_FLUSH_S)
            due = self.checkpoint.due(only)
            offsets = [_topic_partition(tp, *point) for tp, point in due.items()]
            if offsets:
                self._committer.submit(consumer, offsets, self.generation)
                if wait_s is not None:
                    self.finish(wait_s, keep_messages)

    def finish(self, wait_s: float | None, keep_messages: bool, revoking: bool = False) -> bool:
        """Take the results of the requests in flight, oldest first, waiting up to ``wait_s``
        for them: True when none is left (each one's offsets are committed, or its error
        raised); False when one is still in flight within its bound (``revoking``: True then,
        a revoke's commit may follow it); past the bound :class:`CommitTimedOut`, or, for a
        request from before a rebalance, it is given up (:meth:`_abandon`)."""
        requests = self._committer.requests
        while requests:
            request = requests[0]
            if wait_s is not None and not request.done.is_set():
                with self.health.blocking("kafka commit"):
                    self._committer.wait(
                        request,
                        wait_s,
                        self.stopping,
                        lambda timeout: self.serve(timeout, keep_messages),
                    )
                if not requests or requests[0] is not request:
                    # serving the client meanwhile ran a rebalance, whose own commit took it
                    continue
            if not request.done.is_set():
                age = time.monotonic() - request.sent_at
                if wait_s is None and age < self.bound():
                    return revoking
                if request.generation != self.generation:
                    self._abandon(request, age)
                    continue
                raise CommitTimedOut(age, request.offsets)
            requests.popleft()
            self._take(request)
        return True

    def _abandon(self, request: CommitRequest, age: float) -> None:
        """Give up a request from before a rebalance that got no result in its bound. Its
        result would confirm nothing (see :meth:`_take`), and when partitions are *lost*
        with it in flight the client may never deliver one: waiting for it would hold every
        later commit back for good. Should it still land, it can only move the group back to
        an older offset (events read again, never lost)."""
        self._committer.requests.popleft()
        log.warning(
            "%s: gave up a commit of %s from before a rebalance: no result in %.1fs "
            "(it would confirm nothing)",
            self.name,
            ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in request.offsets),
            age,
        )

    def _take(self, request: CommitRequest) -> None:
        if request.generation != self.generation:
            log.info(
                "%s: a commit from before a rebalance returned (%s); it confirms nothing",
                self.name,
                request.error or "ok",
            )
            return
        if request.error is not None:
            if self._refused_in_rebalance(request):
                return
            raise request.error
        self._refused_since = None
        for o in request.offsets:
            self.checkpoint.confirmed((o.topic, o.partition), o.offset, o.metadata)
        self.metrics.commits.inc()

    def _refused_in_rebalance(self, request: CommitRequest) -> bool:
        """Whether the request was refused because the group rebalances, for less than the
        commit bound so far: its offsets stay due, for the next commit (True). A refusal for
        longer is an outage like any other (False: the error is raised)."""
        assert request.error is not None
        err = request.error.args[0] if request.error.args else None
        if not isinstance(err, KafkaError) or err.code() not in REFUSED_IN_REBALANCE:
            return False
        now = time.monotonic()
        if self._refused_since is None:
            self._refused_since = now
        elif now - self._refused_since >= self.bound():
            return False
        log.info(
            "%s: commit of %s refused while the group rebalances (%s); committed again after it",
            self.name,
            ", ".join(f"{o.topic}[{o.partition}]@{o.offset}" for o in request.offsets),
            err.name(),
        )
        return True

    # --- restart points ---------------------------------------------------------------------
    def skip_durable(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Partitions lost while their commit could not be made (a broker outage outlasting
        the session) come back here: start them after what this process already made durable
        rather than at the stale commit, so an outage does not double the output (not those
        the service starts itself or resumes from the group's commit: see the checkpoint).

        Safe for any owner in between: it committed what it made durable, and starting at
        max(committed, ours) re-reads nothing that is durable and skips nothing that is not.
        When the group's commit cannot be read (a coordinator still loading after a restart),
        ours alone skips nothing either: at worst an owner in between is read again.
        """
        points = self.checkpoint.restart_points((p.topic, p.partition) for p in partitions)
        lost = [p for p in partitions if (p.topic, p.partition) in points]
        if not lost:
            return
        try:
            by_tp = {(c.topic, c.partition): c.offset for c in consumer.committed(lost, timeout=10)}
        except KafkaException as exc:
            log.info(
                "%s: committed offsets unavailable (%s); starting where this process's output "
                "was durable",
                self.name,
                exc,
            )
            by_tp = {}
        self.checkpoint.restarted(points)
        for p in lost:
            tp = (p.topic, p.partition)
            durable = points[tp]
            if by_tp.get(tp, OFFSET_INVALID) < durable:
                p.offset = durable
                log.info(
                    "%s: %s[%d] starts at %d, where its output was durable before it was lost",
                    self.name,
                    *tp,
                    durable,
                )


def _topic_partition(tp: Partition, offset: int, metadata: str | None) -> TopicPartition:
    if metadata:
        return TopicPartition(tp[0], tp[1], offset, metadata)
    return TopicPartition(tp[0], tp[1], offset)
