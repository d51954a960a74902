"""Which partition of the events topic a run lives on: Kafka's Java ``murmur2`` partitioner.

The publisher produces with ``murmur2_random`` (Java-compatible for non-null keys), so a resumed
run can compute its partition and ask the service to have consumed it to its end before a miss
counts (read-your-writes across a crash, when the dead process's acknowledgements are gone).
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(run_id: str, partitions: int) -> int:
    """``toPositive(murmur2(runId)) % partitions``: the partition every event of the run is on."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return (murmur2(run_id.encode("utf-8")) & 0x7FFFFFFF) % partitions
