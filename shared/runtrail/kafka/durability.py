"""How many copies of a record the topics keep, and how many must hold it before it counts.

Every client produces with ``acks=all``, which waits for the *in-sync* replicas only: with
``min.insync.replicas`` at Kafka's default of 1, a replicated topic whose in-sync set shrank to
its leader acknowledges records that one disk holds, and losing that broker loses them. So each
topic gets ``min.insync.replicas = min(2, RF)`` (one broker may be down without refusing
writes; no acknowledged record sits on one copy) and ``unclean.leader.election.enable=false``
(a replica that missed records never becomes leader and truncates the others to its log).

The replication factor is the operator's when configured; otherwise the cluster's: that of the
topics runtrail already has there, else the brokers' ``default.replication.factor`` (never more
than the brokers there are).

A client that finds a replicated topic with a minimum in-sync set of 1 logs a warning at
start and runs on (docs/OPERATIONS.md, "Durability settings", says why it does not refuse).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, TopicMetadata

from runtrail.config import Settings
from runtrail.kafka.admin import admin_client
from runtrail.kafka.client_log import client_logger

log = logging.getLogger(__name__)

MIN_ISR = "min.insync.replicas"
UNCLEAN_ELECTION = "unclean.leader.election.enable"
#: the in-sync copies a write needs, at most: one broker may be down and writes still go on
MIN_ISR_CAP = 2
#: how long the start-time check may take before it gives up (silently: the broker is away)
CHECK_TIMEOUT_S = 5.0
#: how long a closing client still lets the check wait for the brokers before cancelling it
JOIN_GRACE_S = 1.0


def wanted_min_isr(replication_factor: int) -> int:
    """``min.insync.replicas`` for a topic of ``replication_factor`` copies."""
    return max(1, min(MIN_ISR_CAP, replication_factor))


def durability_configs(replication_factor: int) -> dict[str, str]:
    """The topic configs ``topics ensure`` sets and checks for durability."""
    return {
        MIN_ISR: str(wanted_min_isr(replication_factor)),
        UNCLEAN_ELECTION: "false",
    }


def topic_replication(metadata: TopicMetadata) -> int:
    """The replication factor of a topic: its largest replica set."""
    return max((len(p.replicas) for p in metadata.partitions.values()), default=0)


@dataclass(frozen=True)
class Replication:
    """The replication factor topics get, and where it comes from (for the report)."""

    factor: int
    source: str

    def __str__(self) -> str:
        return f"replication factor {self.factor} ({self.source})"


def _broker_default_replication(
    admin: AdminClient, broker_ids: Sequence[int], timeout: float
) -> int:
    resource = ConfigResource(ConfigResource.Type.BROKER, str(min(broker_ids)))
    future = admin.describe_configs([resource], request_timeout=timeout)[resource]
    entries = future.result(timeout=timeout)
    entry = entries.get("default.replication.factor")
    try:
        return int(entry.value) if entry is not None and entry.value is not None else 1
    except ValueError:
        return 1


def cluster_replication(
    admin: AdminClient,
    configured: int | None,
    names: Iterable[str],
    topics: Mapping[str, TopicMetadata],
    timeout: float,
) -> Replication:
    """The replication factor for runtrail's topics ``names`` on this cluster.

    ``topics`` is the cluster's topic metadata (``list_topics``). Raises ``KafkaException``
    when the brokers' config cannot be read."""
    if configured is not None:
        return Replication(configured, "configured")
    present = [topic_replication(topics[name]) for name in names if name in topics]
    if present:
        return Replication(max(present), "that of the existing topics")
    brokers = sorted(admin.list_topics(timeout=timeout).brokers)
    if not brokers:
        return Replication(1, "no broker listed")
    default = _broker_default_replication(admin, brokers, timeout)
    if default > len(brokers):
        return Replication(len(brokers), f"the {len(brokers)} brokers of the cluster")
    return Replication(max(1, default), "the brokers' default.replication.factor")


@dataclass(frozen=True)
class WeakTopic:
    """A replicated topic that acknowledges writes held by fewer than two brokers."""

    name: str
    replication_factor: int
    min_isr: int

    def __str__(self) -> str:
        return (
            f"topic {self.name} has {self.replication_factor} replicas but "
            f"{MIN_ISR}={self.min_isr}: an acknowledged record may sit on one broker only "
            f"(set it to {wanted_min_isr(self.replication_factor)}; `runtrail topics ensure` "
            "reports it)"
        )


#: the slices a cancellable check waits for the topic list in: how soon it sees a cancel
_LIST_SLICE_S = 0.25


def _listed_topics(
    admin: AdminClient, timeout: float, cancel: threading.Event | None
) -> dict[str, TopicMetadata] | None:
    """The cluster's topic metadata, waited for in slices; None once ``cancel`` is set."""
    if cancel is None:
        return dict(admin.list_topics(timeout=timeout).topics)
    deadline = time.monotonic() + timeout
    while not cancel.is_set():
        left = deadline - time.monotonic()
        try:
            return dict(admin.list_topics(timeout=max(0.01, min(_LIST_SLICE_S, left))).topics)
        except KafkaException:
            if left <= _LIST_SLICE_S:
                raise
    return None


def weak_topics(
    admin: AdminClient,
    names: Iterable[str],
    timeout: float,
    cancel: threading.Event | None = None,
) -> list[WeakTopic]:
    """The topics of ``names`` that exist, are replicated and have a minimum in-sync set of 1
    (none if ``cancel`` is set before the brokers answered)."""
    listed = _listed_topics(admin, timeout, cancel)
    if listed is None:
        return []
    replicated = {
        name: topic_replication(listed[name])
        for name in dict.fromkeys(names)
        if name in listed and topic_replication(listed[name]) > 1
    }
    if not replicated:
        return []
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in replicated]
    weak: list[WeakTopic] = []
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        entry = future.result(timeout=timeout).get(MIN_ISR)
        try:
            min_isr = int(entry.value) if entry is not None and entry.value is not None else 1
        except ValueError:
            continue
        if min_isr < MIN_ISR_CAP:
            weak.append(WeakTopic(resource.name, replicated[resource.name], min_isr))
    return sorted(weak, key=lambda w: w.name)


def warn_weak_topics(
    settings: Settings,
    names: Sequence[str],
    who: str,
    timeout: float = CHECK_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> list[WeakTopic]:
    """Log a warning for each weak topic of ``names``; a broker that does not answer is left to
    the client's own outage handling (nothing is logged here)."""
    config: dict[str, Any] = settings.kafka_config(
        logger=client_logger("runtrail.durability.librdkafka")
    )
    config["socket.connection.setup.timeout.ms"] = int(timeout * 1000)
    try:
        found = weak_topics(admin_client(config), names, timeout, cancel)
    except (KafkaException, ValueError) as exc:
        log.debug("%s: durability check skipped: %s", who, exc)
        return []
    for weak in found:
        log.warning("%s: %s", who, weak)
    return found


class DurabilityCheck(threading.Thread):
    """:func:`warn_weak_topics` on a thread of its own, so that a client's start never waits
    for it. The client joins it before it closes (its admin client is gone before the process
    ends); :meth:`join` gives a check still waiting for the brokers :data:`JOIN_GRACE_S` (a
    broker that answers answers well within it), then cancels it, so a client stopped while no
    broker answers does not wait out :data:`CHECK_TIMEOUT_S`."""

    def __init__(self, settings: Settings, names: Sequence[str], who: str) -> None:
        self.cancel = threading.Event()
        super().__init__(
            target=warn_weak_topics,
            args=(settings, list(names), who),
            kwargs={"cancel": self.cancel},
            name=f"runtrail-durability[{who}]",
            daemon=True,
        )

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        super().join(JOIN_GRACE_S if timeout is None else min(JOIN_GRACE_S, timeout))
        self.cancel.set()
        super().join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def start_durability_check(settings: Settings, names: Sequence[str], who: str) -> DurabilityCheck:
    """A started :class:`DurabilityCheck`."""
    check = DurabilityCheck(settings, names, who)
    check.start()
    return check
