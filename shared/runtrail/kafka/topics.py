"""The topics of the design (the five of DESIGN.md and the scaled-out OTLP ingest's two), and
creating or checking them on a cluster.

``ensure_topics`` creates what is missing and, for what exists, compares the partition count,
the replication factor and every config we set with what the cluster has. A difference is
reported, never silently accepted and never altered: changing a live topic (partitions can only
grow, which moves run keys to other partitions) is an operator's decision.

Every topic's ``max.message.bytes`` is sized from ``max_event_bytes`` plus
:data:`RECORD_HEADROOM_BYTES` (key, headers, record overhead, the dead-letter and audit
envelopes around an event), so that a legal event goes end to end; a topic left at the
broker's 1 MB default is reported as drift.

Durability is set and checked the same way (:mod:`runtrail.kafka.durability`): the replication
factor (the cluster's when none is configured), ``min.insync.replicas`` and unclean leader
election off.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, TopicMetadata

from runtrail.config import Settings
from runtrail.kafka.durability import (
    Replication,
    cluster_replication,
    durability_configs,
    topic_replication,
)

Status = Literal["created", "ok", "differs"]

#: Room above ``max_event_bytes`` for what travels with an event in one record.
RECORD_HEADROOM_BYTES = 256 * 1024


def max_message_bytes(max_event_bytes: int) -> int:
    """The record size topics and clients must allow for events of ``max_event_bytes``."""
    return max_event_bytes + RECORD_HEADROOM_BYTES


class TopicsError(RuntimeError):
    """Topics could not be listed, created, described or deleted."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic as the design wants it: name, partitions, replication and the configs we set."""

    name: str
    partitions: int
    replication_factor: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    role: str = ""


@dataclass(frozen=True)
class Difference:
    """One property of an existing topic that is not what its spec asks for."""

    item: str
    expected: str
    actual: str | None

    def __str__(self) -> str:
        return f"{self.item}: want {self.expected}, have {self.actual if self.actual is not None else 'unset'}"


@dataclass(frozen=True)
class TopicOutcome:
    """What ``ensure_topics`` did or found for one topic."""

    spec: TopicSpec
    status: Status
    differences: tuple[Difference, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class EnsureReport:
    """Every topic's outcome, in the order of the specs."""

    outcomes: tuple[TopicOutcome, ...]
    replication: Replication | None = None

    def with_status(self, status: Status) -> list[TopicOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def has_differences(self) -> bool:
        return any(o.status == "differs" for o in self.outcomes)

    def by_name(self) -> dict[str, TopicOutcome]:
        return {o.name: o for o in self.outcomes}

    def format_table(self) -> str:
        """A plain-text table: one row per topic, one more per difference."""
        rows = [("TOPIC", "STATUS", "PARTITIONS", "DETAILS")]
        for outcome in self.outcomes:
            details = [str(d) for d in outcome.differences] or [""]
            rows.append((outcome.name, outcome.status, str(outcome.spec.partitions), details[0]))
            rows.extend(("", "", "", extra) for extra in details[1:])
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [
            "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
            for row in rows
        ]
        table = "\n".join(line.rstrip() for line in lines)
        return f"{table}\n{self.replication}" if self.replication is not None else table


#: how long the raw OTLP topic keeps what the receivers forwarded (a week)
OTLP_RAW_RETENTION_MS = 7 * 24 * 3600 * 1000


def otlp_traces_topic(settings: Settings) -> str:
    """The OTLP mapper's trace ledger: named after the raw topic, partitioned as it is."""
    return f"{settings.otlp_raw_topic}.traces"


#: the group of each read of the trace ledger (one of its own, never committed: the ledger is
#: read whole); the ACLs grant the prefix
LEDGER_GROUP_PREFIX = "runtrail-otlp-ledger-"


def design_topic_names(settings: Settings) -> list[str]:
    """The names of the five topics of the design, as ``settings`` name them."""
    return [
        settings.events_topic,
        settings.dlq_topic,
        settings.resume_cache_topic,
        settings.sessions_topic,
        settings.audit_topic,
    ]


def design_topics(settings: Settings, replication_factor: int | None = None) -> list[TopicSpec]:
    """The topics table of DESIGN.md (and the scaled-out OTLP ingest's two), named and sized by
    ``settings``.

    ``replication_factor`` (else the settings', else 1) also sets the minimum in-sync set."""
    partitions = settings.partitions
    replication = replication_factor or settings.replication_factor or 1
    sized = {
        "max.message.bytes": str(max_message_bytes(settings.max_event_bytes)),
        **durability_configs(replication),
    }
    compacted = {"cleanup.policy": "compact", **sized}
    return [
        TopicSpec(
            settings.events_topic,
            partitions,
            replication,
            {
                "message.timestamp.type": "LogAppendTime",
                "retention.ms": str(settings.events_retention_ms),
                **sized,
            },
            role="events",
        ),
        TopicSpec(settings.dlq_topic, partitions, replication, dict(sized), role="dlq"),
        TopicSpec(
            settings.resume_cache_topic, partitions, replication, compacted, role="resume-cache"
        ),
        TopicSpec(settings.sessions_topic, partitions, replication, compacted, role="sessions"),
        TopicSpec(settings.audit_topic, partitions, replication, dict(sized), role="audit"),
        # a staging topic: the mapper commits past a trace once its events are on the events
        # topic, so a week covers any mapper outage worth recovering from; the broker's clock
        # stamps its records (the mapper forgets idle traces by them, never by a receiver's)
        TopicSpec(
            settings.otlp_raw_topic,
            partitions,
            replication,
            {
                "message.timestamp.type": "LogAppendTime",
                "retention.ms": str(OTLP_RAW_RETENTION_MS),
                **sized,
            },
            role="otlp-raw",
        ),
        # where a trace the mapper forgot while open left its sequence (one record per such
        # trace, the latest kept), read whole by a mapper when it takes a raw partition
        TopicSpec(
            otlp_traces_topic(settings), partitions, replication, compacted, role="otlp-traces"
        ),
    ]


def _same_value(key: str, expected: str, actual: str | None) -> bool:
    if actual is None:
        return False
    if key == "cleanup.policy":  # a list whose order means nothing
        return {p.strip() for p in expected.split(",")} == {p.strip() for p in actual.split(",")}
    if expected.strip() == actual.strip():
        return True
    try:
        return int(expected) == int(actual)
    except ValueError:
        return False


def _compare(
    spec: TopicSpec, metadata: TopicMetadata, configs: Mapping[str, str | None]
) -> tuple[Difference, ...]:
    differences: list[Difference] = []
    partitions = len(metadata.partitions)
    if partitions != spec.partitions:
        differences.append(Difference("partitions", str(spec.partitions), str(partitions)))
    replication = topic_replication(metadata)
    if replication != spec.replication_factor:
        differences.append(
            Difference("replication.factor", str(spec.replication_factor), str(replication))
        )
    for key, expected in spec.config.items():
        actual = configs.get(key)
        if not _same_value(key, expected, actual):
            differences.append(Difference(key, expected, actual))
    return tuple(differences)


def _error_code(exc: KafkaException) -> int | None:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


def list_topic_metadata(admin: AdminClient, timeout: float) -> dict[str, TopicMetadata]:
    """The cluster's topics, or a :class:`TopicsError` saying the cluster did not answer."""
    try:
        return dict(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise TopicsError(f"cannot list topics: {exc}") from exc


def list_topics_including(
    admin: AdminClient, names: Iterable[str], timeout: float
) -> dict[str, TopicMetadata]:
    """The cluster's topics, listing each of ``names`` that exists.

    The broker that answers a listing learns new topics from the controller on its own time,
    so it may leave out one created a moment ago; a decision taken on such a listing (create
    it, or adopt the replication of the topics that exist) would be wrong. The names it lacks
    are put to the controller as a validate-only creation: one it answers with "already
    exists" is waited for until listed."""
    topics = list_topic_metadata(admin, timeout)
    absent = [name for name in dict.fromkeys(names) if name not in topics]
    if not absent:
        return topics
    lagging = _existing_at_controller(admin, absent, timeout)
    if not lagging:
        return topics
    # the second listing may come from another broker: each topic as either listing showed it
    return {**topics, **wait_for_topics(admin, lagging, timeout)}


def _existing_at_controller(admin: AdminClient, names: Sequence[str], timeout: float) -> list[str]:
    """Those of ``names`` the controller says exist (a validate-only creation creates nothing;
    any other refusal, such as no right to create, leaves the name out: the listing stands)."""
    probes = [NewTopic(name, num_partitions=1, replication_factor=1) for name in names]
    futures = admin.create_topics(
        probes, validate_only=True, operation_timeout=timeout, request_timeout=timeout
    )
    existing: list[str] = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                existing.append(name)
    return existing


def describe_topic_configs(
    admin: AdminClient, names: Iterable[str], timeout: float
) -> dict[str, dict[str, str | None]]:
    """Effective config (``name -> value``) of each topic, defaults included.

    A topic the cluster listed may still be unknown to the broker asked for its config (each
    broker learns new topics from the controller on its own time): that answer is retried
    until ``timeout``, then reported like any other refusal."""
    pending = list(dict.fromkeys(names))
    result: dict[str, dict[str, str | None]] = {}
    deadline = time.monotonic() + timeout
    while pending:
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in pending]
        futures = admin.describe_configs(resources, request_timeout=timeout)
        unknown: list[str] = []
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=timeout)
            except KafkaException as exc:
                lagging = _error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART
                if lagging and time.monotonic() < deadline:
                    unknown.append(resource.name)
                    continue
                raise TopicsError(f"cannot describe topic {resource.name}: {exc}") from exc
            result[resource.name] = {key: entry.value for key, entry in entries.items()}
        pending = unknown
        if pending:
            time.sleep(0.2)
    return result


def _create(admin: AdminClient, specs: Sequence[TopicSpec], timeout: float) -> set[str]:
    """Create ``specs``; the names actually created (one created meanwhile is left out)."""
    if not specs:
        return set()
    new_topics = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor,
            config=dict(s.config),
        )
        for s in specs
    ]
    futures = admin.create_topics(new_topics, operation_timeout=timeout, request_timeout=timeout)
    created: set[str] = set()
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if _error_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # raced with someone else: it gets compared like any existing topic
            raise TopicsError(f"cannot create topic {name}: {exc}") from exc
        created.add(name)
    return created


def ensure_topics(
    admin: AdminClient,
    specs: Sequence[TopicSpec],
    timeout: float = 30.0,
    listed: Mapping[str, TopicMetadata] | None = None,
) -> EnsureReport:
    """Create the missing topics of ``specs``; compare the existing ones with their spec.
    ``listed``: the cluster's topics as :func:`list_topics_including` gave them for these
    specs (listed here when not given)."""
    names = [s.name for s in specs]
    existing = dict(listed) if listed is not None else list_topics_including(admin, names, timeout)
    created = _create(admin, [s for s in specs if s.name not in existing], timeout)
    if created:
        wait_for_topics(admin, created, timeout)
    to_compare = [s for s in specs if s.name not in created]
    raced = [s.name for s in to_compare if s.name not in existing]
    if raced:  # created by someone else meanwhile
        existing = {**existing, **wait_for_topics(admin, raced, timeout)}
    configs = describe_topic_configs(admin, [s.name for s in to_compare], timeout)
    outcomes: list[TopicOutcome] = []
    for spec in specs:
        if spec.name in created:
            outcomes.append(TopicOutcome(spec, "created"))
            continue
        differences = _compare(spec, existing[spec.name], configs.get(spec.name, {}))
        outcomes.append(TopicOutcome(spec, "differs" if differences else "ok", differences))
    return EnsureReport(tuple(outcomes))


def ensure_design_topics(admin: AdminClient, settings: Settings, timeout: float) -> EnsureReport:
    """:func:`ensure_topics` for the design's topics, at the cluster's replication factor when
    ``settings`` configure none (so that a replicated cluster is not all "differs")."""
    named = [spec.name for spec in design_topics(settings)]
    listed = list_topics_including(admin, named, timeout)
    try:
        replication = cluster_replication(
            admin, settings.replication_factor, design_topic_names(settings), listed, timeout
        )
    except KafkaException as exc:
        raise TopicsError(f"cannot read the cluster's replication factor: {exc}") from exc
    specs = design_topics(settings, replication.factor)
    report = ensure_topics(admin, specs, timeout, listed=listed)
    return EnsureReport(report.outcomes, replication)


def wait_for_topics(
    admin: AdminClient, names: Iterable[str], timeout: float = 30.0
) -> dict[str, TopicMetadata]:
    """Wait until every topic in ``names`` exists and each of its partitions has a leader;
    the listing that showed them all."""
    wanted = set(names)
    deadline = time.monotonic() + timeout
    pending = wanted
    while True:
        try:
            topics = dict(admin.list_topics(timeout=max(1.0, min(5.0, timeout))).topics)
        except KafkaException:
            topics = {}
        pending = {
            name
            for name in wanted
            if name not in topics
            or topics[name].error is not None
            or not topics[name].partitions
            or any(p.leader < 0 for p in topics[name].partitions.values())
        }
        if not pending:
            return topics
        if time.monotonic() >= deadline:
            raise TopicsError(
                f"topics not ready after {timeout:.0f}s: {', '.join(sorted(pending))}"
            )
        time.sleep(0.2)


def delete_topics(admin: AdminClient, names: Iterable[str], timeout: float = 30.0) -> None:
    """Delete ``names``; a topic that is already gone is fine."""
    topics = list(names)
    if not topics:
        return
    futures = admin.delete_topics(topics, operation_timeout=timeout, request_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if _error_code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise TopicsError(f"cannot delete topic {name}: {exc}") from exc
