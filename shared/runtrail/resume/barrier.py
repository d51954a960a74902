"""The read-your-writes baseline of a resumed run: the end of its partition, taken at resume.

After a crash the new process has no acknowledgements from the dead one, so "what did my earlier
life write?" is answered from the broker instead: everything the dead process wrote for the run
is on the run's partition below its current end offset. A resumed run asks the cache to have
consumed that far before any miss counts.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from runtrail.config import Settings
from runtrail.resume.errors import CacheUnavailable
from runtrail.resume.partitioning import partition_for


def resume_barrier(settings: Settings, run_id: str, timeout: float = 10.0) -> dict[int, int]:
    """``{partition: highest offset}`` of the run's partition now (empty if it is empty)."""
    topic = settings.events_topic
    consumer = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"runtrail-resume-barrier-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
            }
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise CacheUnavailable(f"topic {topic!r} is not available for the resume barrier")
        partition = partition_for(run_id, len(described.partitions))
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
    except KafkaException as exc:
        raise CacheUnavailable(f"cannot read the end of the run's partition: {exc}") from exc
    finally:
        consumer.close()
    return {partition: high - 1} if high > 0 else {}
