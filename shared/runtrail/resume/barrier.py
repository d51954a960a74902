"""The read-your-writes baseline of a resumed run: the end of its partition, taken at resume.

After a crash the new process has no acknowledgements from the dead one, so "what did my earlier
life write?" is answered from the broker instead: everything the dead process wrote for the run
is on the run's partition below its current end offset. A resumed run asks the cache to have
consumed that far before any miss counts.
"""

from __future__ import annotations

from confluent_kafka import KafkaException

from runtrail.config import Settings
from runtrail.kafka.ends import data_ends, end_offsets
from runtrail.resume.errors import CacheUnavailable
from runtrail.resume.partitioning import partition_for


def resume_barrier(settings: Settings, run_id: str, timeout: float = 10.0) -> dict[int, int]:
    """``{partition: offset of its last event}`` for the run's partition now (empty if it has
    none). The last *event*, not the high watermark less one: when the outbox relay's commit
    marker ends the partition, no consumer ever processes that offset, and a barrier on it
    would never be reached (:func:`runtrail.kafka.ends.data_ends`)."""
    topic = settings.events_topic
    try:
        ends = end_offsets(settings, topic, timeout=timeout)
        partition = partition_for(run_id, len(ends))
        high = ends[partition]
        end = (
            data_ends(settings, topic, {partition: high}, timeout=timeout)[partition] if high else 0
        )
    except KafkaException as exc:
        raise CacheUnavailable(
            f"cannot read the end of the run's partition of {topic!r}: {exc}"
        ) from exc
    return {partition: end - 1} if end > 0 else {}
