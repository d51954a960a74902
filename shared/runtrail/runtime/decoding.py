"""Turn a consumed batch into :class:`Delivered` events, dead-lettering what cannot be read.

This is the hot path of every service: one tight loop per batch, counters updated once per
batch. Order within a partition is preserved; a poison message is dead-lettered in place and
the batch goes on. Before any service sees an event it has passed the size limit (on the raw
bytes), decoding, validation and the depth/non-finite walk of its ``data``
(:class:`~runtrail.events.limits.EventLimits`); a :class:`RecursionError` anywhere in that is
``too-deep``. A second event of a run at a sequence another eventId already holds is
``sequence-conflict`` and never reaches a service: every service decides alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from confluent_kafka import KafkaError, Message

from runtrail.events import Event, EventCodec, EventError
from runtrail.events.limits import EventLimits, TooDeep, TooLarge
from runtrail.events.native import NATIVE
from runtrail.runtime.delivery import Delivered, RawRecord
from runtrail.runtime.sequencing import SequenceChecks, Verdict

ExtraHeaders = list[tuple[str, str | bytes | None]]
#: (message, reason, detail)
DeadLetterSink = Callable[[Message, str, str], None]
#: (message, reason, detail, extra headers): for dead letters that carry more than a reason
HeadersSink = Callable[[Message, str, str, ExtraHeaders | None], None]

SEQUENCE_CONFLICT = "sequence-conflict"
H_CONFLICT_FIRST = "rt.conflict.first-event-id"
H_CONFLICT_EVENT = "rt.conflict.event-id"
H_CONFLICT_SEQUENCE = "rt.conflict.sequence"


@dataclass
class BatchResult:
    """The events to process, the highest offset seen per partition, and what was counted."""

    delivered: list[Delivered] = field(default_factory=list)
    #: the records of a raw service (:func:`raw_batch`), instead of ``delivered``
    records: list[RawRecord] = field(default_factory=list)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # next offset per partition
    consumed: int = 0
    dead: dict[str, int] = field(default_factory=dict)
    anomalies: dict[str, int] = field(default_factory=dict)
    #: what the client handed over instead of messages (a topic that does not exist, …)
    errors: list[KafkaError] = field(default_factory=list)


def iso_from_ms(ms: int) -> str:
    """A broker timestamp (epoch ms) as the ``recordedAt`` the codec sets: UTC, to the ms."""
    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@dataclass(eq=False)
class BatchDecoder:
    """Decodes, upcasts and validates; checks per-run sequences; routes poison to dead letters.

    ``with_written=False``: the service does not read :attr:`Delivered.written`, so an event
    the compiled path builds straight from its bytes is delivered with None there."""

    codec: EventCodec
    sequences: SequenceChecks
    dead_letter: DeadLetterSink
    limits: EventLimits = field(default_factory=EventLimits)
    _: KW_ONLY
    with_headers: HeadersSink | None = None
    with_written: bool = True

    def _dead(self, result: BatchResult, msg: Message, reason: str, detail: str) -> None:
        self.dead_letter(msg, reason, detail)
        result.dead[reason] = result.dead.get(reason, 0) + 1

    def decode_batch(self, messages: list[Message]) -> BatchResult:
        result = BatchResult()
        delivered = result.delivered
        append = delivered.append
        positions = result.positions
        decode = self.codec.decode_parts
        check = self.sequences.check
        max_bytes = self.limits.max_event_bytes
        check_value = self.limits.check_value
        # ``data`` itself is one level: with a limit that low, walk it whole as ever
        flat_ok = self.limits.max_json_depth > 1
        depth_limit = self.limits.max_json_depth if flat_ok else None
        # the event alone, without the written form (a whole-data walk needs that form)
        decode_event = None if self.with_written or not flat_ok else self.codec.decode_event
        # the compiled loop over the common case (see _run_native); None: this loop alone
        run = None if decode_event is None else self._run_native
        NEXT = Verdict.NEXT
        # LogAppendTime is stamped per produce request, so consecutive messages share it
        last_ts, last_iso = -1, None
        skipped = 0  # messages that are errors, not events
        to_walk: tuple[str, ...]
        # the loop runs once per consumed message: no per-event helper calls (``cast`` is
        # one), one tuple per event handed on; the message getters return what their names
        # say for a message without an error. With the compiled loop, this one handles only
        # the messages it stops at (errors, refusals, anything but NEXT), then hands back.
        index, count = 0, len(messages)
        while index < count:
            checked: tuple[Event, Verdict] | None = None
            if run is not None:
                index, checked = run(
                    messages, index, self.sequences, positions, delivered, Delivered,
                    max_bytes, depth_limit, iso_from_ms,
                )  # fmt: skip
                if index >= count:
                    break
            msg = messages[index]
            index += 1
            if msg.error() is not None:
                skipped += 1
                result.errors.append(msg.error())  # type: ignore[arg-type]
                continue  # nothing to process: the runner reports what matters
            topic: str = msg.topic()  # type: ignore[assignment]
            partition: int = msg.partition()  # type: ignore[assignment]
            offset: int = msg.offset()  # type: ignore[assignment]
            positions[(topic, partition)] = offset + 1
            ts_type, ts = msg.timestamp()
            if ts != last_ts:
                last_ts, last_iso = ts, iso_from_ms(ts) if ts_type else None
            value = msg.value()
            if value is not None and len(value) > max_bytes:
                self._dead(result, msg, TooLarge.reason, _too_large(len(value), max_bytes))
                continue
            if checked is not None:  # decoded and checked (not NEXT) by the compiled loop
                event, verdict = checked
                if verdict is NEXT or not self._anomaly(result, msg, event, verdict):
                    append(Delivered(event, None, topic, partition, offset, ts, msg.key(), msg))
                continue
            try:
                direct = (
                    None if decode_event is None else decode_event(value, last_iso, depth_limit)
                )
                if direct is not None and not direct[1]:
                    event, written, to_walk = direct[0], None, ()
                else:  # the written form too: asked for, or there are fields to walk in it
                    # (decode_parts tries the compiled decode first, then the Python path)
                    event, written, to_walk = decode(value, last_iso, depth_limit)
                if flat_ok:  # only fields that can be too deep or non-finite (the codec
                    if to_walk:  # knows them by the schema and the JSON texts)
                        assert written is not None  # to_walk is () on the direct path
                        data = written["data"]
                        for name in to_walk:
                            check_value(data.get(name), f"data.{name}", 1)
                else:
                    assert written is not None  # no direct path without flat_ok
                    check_value(written["data"], "data")
            except EventError as exc:
                self._dead(result, msg, exc.reason, str(exc))
                continue
            except RecursionError as exc:
                self._dead(result, msg, TooDeep.reason, f"recursion limit while decoding: {exc}")
                continue
            verdict = check(
                partition, event.tenant_id, event.run_id, event.sequence, event.event_id
            )
            if verdict is not NEXT and self._anomaly(result, msg, event, verdict):
                continue
            append(Delivered(event, written, topic, partition, offset, ts, msg.key(), msg))
        result.consumed = len(messages) - skipped
        return result

    @property
    def _run_native(self) -> Callable[..., tuple[int, tuple[Event, Verdict] | None]] | None:
        """``EventDecoder.decode_run`` when both it and the compiled sequence checker are
        there (it checks with the checker's own state) and the service does not read the
        written form (the run builds events straight from the bytes), else None."""
        run, native = self.codec.decode_run, NATIVE
        if run is None or native is None or self.with_written:
            return None
        return run if isinstance(self.sequences, native.SequenceState) else None

    def _anomaly(self, result: BatchResult, msg: Message, event: Event, verdict: Verdict) -> bool:
        """Count a verdict other than NEXT; whether the event is kept from the service (a
        duplicate is skipped, a conflict dead-lettered)."""
        result.anomalies[verdict.value] = result.anomalies.get(verdict.value, 0) + 1
        if verdict is Verdict.DUPLICATE:
            return True
        if verdict is Verdict.CONFLICT:
            self._conflict(
                result,
                msg,
                msg.partition(),  # type: ignore[arg-type]
                event.tenant_id,
                event.run_id,
                event.sequence,
                event.event_id,
            )
            return True
        return False

    def _conflict(
        self,
        result: BatchResult,
        msg: Message,
        partition: int,
        tenant_id: str,
        run_id: str,
        sequence: int,
        event_id: str,
    ) -> None:
        first = self.sequences.holder(partition, tenant_id, run_id, sequence) or ""
        detail = (
            f"run {tenant_id}/{run_id} sequence {sequence} is already held by event {first}; "
            f"event {event_id} reuses it"
        )
        if self.with_headers is not None:
            self.with_headers(
                msg, SEQUENCE_CONFLICT, detail, conflict_headers(first, event_id, sequence)
            )
        else:
            self.dead_letter(msg, SEQUENCE_CONFLICT, detail)
        result.dead[SEQUENCE_CONFLICT] = result.dead.get(SEQUENCE_CONFLICT, 0) + 1


def raw_batch(messages: list[Message]) -> BatchResult:
    """A consumed batch of a topic that holds no runtrail events, for a raw service: each
    record as it is, in partition order, and the positions it reached (errors skipped)."""
    result = BatchResult()
    append = result.records.append
    positions = result.positions
    for msg in messages:
        if msg.error() is not None:
            result.errors.append(msg.error())  # type: ignore[arg-type]
            continue
        topic: str = msg.topic()  # type: ignore[assignment]
        partition: int = msg.partition()  # type: ignore[assignment]
        offset: int = msg.offset()  # type: ignore[assignment]
        positions[(topic, partition)] = offset + 1
        append(RawRecord(topic, partition, offset, msg.timestamp()[1], msg.key(), msg.value(), msg))
    result.consumed = len(result.records)
    return result


def conflict_headers(first_event_id: str, event_id: str, sequence: int) -> ExtraHeaders:
    """Headers of a ``sequence-conflict`` dead letter (the same from the runtime and audit)."""
    return [
        (H_CONFLICT_FIRST, first_event_id.encode()),
        (H_CONFLICT_EVENT, event_id.encode()),
        (H_CONFLICT_SEQUENCE, str(sequence).encode()),
    ]


def _too_large(size: int, limit: int) -> str:
    return f"message value is {size} bytes, over the limit of {limit} (RUNTRAIL_MAX_EVENT_BYTES)"
