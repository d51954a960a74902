"""Turn a consumed batch into :class:`Delivered` events, dead-lettering what cannot be read.

This is the hot path of every service: one tight loop per batch, counters updated once per
batch. Order within a partition is preserved; a poison message is dead-lettered in place and
the batch goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

from confluent_kafka import Message

from runtrail.events import EventCodec, EventError
from runtrail.runtime.delivery import Delivered
from runtrail.runtime.sequencing import SequenceChecker, Verdict

DeadLetterSink = Callable[[Message, str, str], None]


@dataclass
class BatchResult:
    """The events to process, the highest offset seen per partition, and what was counted."""

    delivered: list[Delivered] = field(default_factory=list)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # next offset per partition
    consumed: int = 0
    dead: dict[str, int] = field(default_factory=dict)
    anomalies: dict[str, int] = field(default_factory=dict)


def _iso_from_ms(ms: int) -> str:
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class BatchDecoder:
    """Decodes, upcasts and validates; checks per-run sequences; routes poison to dead letters."""

    def __init__(
        self, codec: EventCodec, sequences: SequenceChecker, dead_letter: DeadLetterSink
    ) -> None:
        self._codec = codec
        self._sequences = sequences
        self._dead_letter = dead_letter

    def decode_batch(self, messages: list[Message]) -> BatchResult:
        result = BatchResult()
        delivered = result.delivered
        positions = result.positions
        decode = self._codec.decode
        check = self._sequences.check
        # LogAppendTime is stamped per produce request, so consecutive messages share it
        last_ts, last_iso = -1, None
        for msg in messages:
            if msg.error() is not None:
                continue  # partition EOF and transient errors: nothing to process
            result.consumed += 1
            topic = cast(str, msg.topic())
            partition = cast(int, msg.partition())
            offset = cast(int, msg.offset())
            positions[(topic, partition)] = offset + 1
            ts_type, ts = msg.timestamp()
            if ts != last_ts:
                last_ts, last_iso = ts, _iso_from_ms(ts) if ts_type else None
            try:
                decoded = decode(msg.value(), last_iso)
            except EventError as exc:
                self._dead_letter(msg, exc.reason, str(exc))
                result.dead[exc.reason] = result.dead.get(exc.reason, 0) + 1
                continue
            event = decoded.event
            verdict = check(
                partition, event.tenant_id, event.run_id, event.sequence, event.event_id
            )
            if verdict is not Verdict.NEXT:
                result.anomalies[verdict.value] = result.anomalies.get(verdict.value, 0) + 1
                if verdict is Verdict.DUPLICATE:
                    continue
            delivered.append(
                Delivered(event, decoded.written, topic, partition, offset, ts, msg.key())
            )
        return result
