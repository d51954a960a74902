"""The broker's side: the topic's partitions and watermarks, a group's committed offsets and
members, offsets by time, and moving the group's offsets (AdminClient, no consumer joins)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from runtrail.config import Settings
from runtrail.kafka.admin import admin_client

#: What librdkafka reports for a partition the group never committed.
NO_OFFSET = -1001


class OffsetsError(RuntimeError):
    """The broker could not answer or refused; the message names the topic or group."""


class GroupActive(OffsetsError):
    """The group has live members: one would overwrite the offsets at its next commit."""


@dataclass(frozen=True, slots=True)
class Watermarks:
    start: int  # the first offset still in the log
    end: int  # the next offset to be written (log end)


class Broker:
    """One AdminClient for one command: every call bounded by ``timeout``, every failure an
    :class:`OffsetsError` naming the topic or group. Looking a topic up never creates it
    (:func:`runtrail.kafka.admin.admin_client`): a mistyped ``--events-topic`` is an error,
    not a new empty topic."""

    def __init__(self, settings: Settings, timeout: float = 15.0) -> None:
        self.settings = settings
        self.timeout = timeout
        self.admin = admin_client(settings.kafka_config())

    def partitions(self, topic: str) -> list[int]:
        try:
            metadata = self.admin.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise OffsetsError(f"cannot describe topic {topic!r}: {exc}") from exc
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise OffsetsError(
                f"topic {topic!r} does not exist on {self.settings.bootstrap_servers}"
            )
        return sorted(described.partitions)

    def _list_offsets(self, topic: str, specs: Mapping[int, OffsetSpec]) -> dict[int, int]:
        request = {TopicPartition(topic, p): spec for p, spec in specs.items()}
        try:
            futures = self.admin.list_offsets(request, request_timeout=self.timeout)
            return {tp.partition: f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise OffsetsError(f"cannot list offsets of {topic!r}: {exc}") from exc

    def watermarks(self, topic: str, partitions: Sequence[int]) -> dict[int, Watermarks]:
        start = self._list_offsets(topic, {p: OffsetSpec.earliest() for p in partitions})  # type: ignore[no-untyped-call]
        end = self._list_offsets(topic, {p: OffsetSpec.latest() for p in partitions})  # type: ignore[no-untyped-call]
        return {p: Watermarks(start[p], end[p]) for p in partitions}

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int
    ) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is at or after ``timestamp_ms``;
        -1 where there is none (the caller takes the log end)."""
        spec = OffsetSpec.for_timestamp(timestamp_ms)
        return self._list_offsets(topic, {p: spec for p in partitions})

    def members(self, group: str) -> list[str]:
        """The group's live members, as ``client-id@host``."""
        try:
            future = self.admin.describe_consumer_groups([group], request_timeout=self.timeout)
            description = future[group].result()
        except KafkaException as exc:
            raise OffsetsError(f"cannot describe consumer group {group!r}: {exc}") from exc
        return [f"{m.client_id}@{m.host}" for m in description.members]

    def committed(self, group: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The group's committed offset per partition (absent: never committed)."""
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in partitions]
        )
        try:
            futures = self.admin.list_consumer_group_offsets(
                [request], request_timeout=self.timeout
            )
            answer = futures[group].result()
        except KafkaException as exc:
            raise OffsetsError(f"cannot read the offsets of group {group!r}: {exc}") from exc
        return {
            tp.partition: tp.offset
            for tp in answer.topic_partitions
            if tp.error is None and tp.offset >= 0
        }

    def require_inactive(self, group: str) -> None:
        members = self.members(group)
        if members:
            raise GroupActive(
                f"consumer group {group!r} has {len(members)} active member(s) "
                f"({', '.join(sorted(members))}); stop every instance of the service first "
                "(a live member would overwrite the offsets at its next commit, and keeps "
                "the positions of its own store in memory)"
            )

    def alter(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Set the group's committed offsets; the broker refuses while it has members."""
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        )
        try:
            futures = self.admin.alter_consumer_group_offsets(
                [request], request_timeout=self.timeout
            )
            answer = futures[group].result()
        except KafkaException as exc:
            raise OffsetsError(f"cannot move the offsets of group {group!r}: {exc}") from exc
        failed = [f"{tp.partition}: {tp.error}" for tp in answer.topic_partitions if tp.error]
        if failed:
            raise OffsetsError(f"group {group!r} refused offsets for {topic}: {'; '.join(failed)}")
