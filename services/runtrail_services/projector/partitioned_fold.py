"""A rebuild's fold that fails on a run met in two partitions.

A partition is folded in its own order, and events of one run in two partitions have no order
between them, so such a run cannot be rebuilt from that topic by any number of workers: the
fold stops, naming the run and its partitions, rather than write a projection that depends on
which partition was read first. Used by the rebuild in one process and by each worker of a
rebuild in several (:mod:`.rebuild_workers`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtrail_services.projector.folder import RunFolder, RunKey
from runtrail_services.projector.replay_fold import ReplayFold


class RunInTwoPartitions(RuntimeError):
    """A run's events are in two partitions: no rebuild can fold them in order."""


def split_run_message(topic: str, key: RunKey, partitions: Iterable[int]) -> str:
    """What to tell about a run met in two partitions (the store being written is wrong)."""
    return (
        f"run {key[0]}/{key[1]} has events in partitions {sorted(set(partitions))} of {topic}. "
        "A rebuild folds each partition in its own order, and events of one run in two "
        "partitions have no order between them, so this run cannot be rebuilt from this topic "
        "with any number of --workers (the live projector folds each partition on its own "
        "too). The publisher keys every event by its run ID, so one partition holds a whole "
        "run: the events in the other partition were produced by something else, with another "
        "key or partitioner. Rebuild from a topic where each run's events are produced keyed "
        "by run ID. The target store is incomplete and wrong: delete it"
    )


class _RunsOfPartition(set[RunKey]):
    """A partition folder's view of the fold's ``met`` runs: says whether a run was met, in
    this partition; raises :class:`RunInTwoPartitions` for a run met in another one. A
    folder asks only when a run is not in its cache (its first event here, or after a trim),
    so this costs a lookup per run, not per event. The set itself stays empty."""

    def __init__(
        self, topic: str, partition: int, partition_of: dict[RunKey, int], met: set[RunKey]
    ) -> None:
        super().__init__()
        self.topic = topic
        self.partition = partition
        self.partition_of = partition_of
        self.met = met

    def __contains__(self, key: object) -> bool:
        owner = self.partition_of.get(key)  # type: ignore[call-overload]
        if owner is None:
            return False
        if owner != self.partition:
            assert isinstance(key, tuple)
            raise RunInTwoPartitions(split_run_message(self.topic, key, [owner, self.partition]))
        return True

    def add(self, key: RunKey) -> None:
        self.partition_of[key] = self.partition
        self.met.add(key)


class PartitionedFold(ReplayFold):
    """A :class:`ReplayFold` that fails on a run met in two partitions (the module doc says why);
    ``partition_of`` holds where each run met was met."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.partition_of: dict[RunKey, int] = {}

    def folder(self, partition: int) -> RunFolder:
        folder = self.folders.get(partition)
        if folder is None:
            folder = super().folder(partition)
            folder.met = _RunsOfPartition(self.topic, partition, self.partition_of, self.runs)
        return folder
