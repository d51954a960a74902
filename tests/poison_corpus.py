"""The poison corpus of issue 11.4, reusable by every service's tests (no tests here).

Each :class:`Poison` is one Kafka record (key, raw value) and the outcomes a service may give
it: ``"processed"`` or a dead-letter reason. Records that a Python publisher could never write
(JSON nested 5,000 deep, ``1e999``, Infinity in a double) are *raw-encoded*: the Avro body is
written directly, so the JSON text inside it is exactly what a foreign writer sent.

:func:`corpus_records` interleaves the corpus with a canary after every item (a fresh run's
``run.accepted``), which every service must process: no item may stop the one after it.
Valid items live in their own run, opened by a ``run.accepted`` at sequence 1, so that a
projection can apply them. Produce with :func:`produce_records` (its producer allows a
5 MB event) onto topics created with :func:`big_topic_config`.
"""

from __future__ import annotations

import io
import random
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from fastavro import schemaless_writer

from runtrail.events import avro_schemas
from runtrail.events.codec import MAGIC
from runtrail.events.limits import DEFAULT_MAX_EVENT_BYTES
from runtrail.kafka.topics import max_message_bytes
from tests.support import encode, form

PROCESSED = "processed"
MB = 1_000_000


@dataclass(frozen=True)
class Poison:
    """One record of the corpus and what a service may make of it."""

    name: str
    key: bytes
    value: bytes
    #: eventId when the value decodes to an event (else None)
    event_id: str | None
    tenant: str
    run_id: str
    sequence: int
    allowed: frozenset[str]
    #: True for the canaries and preludes: they must be processed
    must_process: bool = False


def raw_encode(
    f: Mapping[str, Any], json_texts: Mapping[str, str] | None = None, **data: Any
) -> bytes:
    """Avro single-object bytes of JSON form ``f``, bypassing the codec's checks.

    ``json_texts`` are put into the JSON-text fields as given (not dumped); ``data`` overrides
    other data fields with raw values (a float('inf') in a double, say).
    """
    schema = next(
        s
        for s in avro_schemas.retained_schemas()
        if (s.event_type, s.version) == (f["type"], f["schemaVersion"])
    )
    record = dict(f)
    record["sequence"] = int(record["sequence"])
    body = dict(record["data"])
    for name in schema.json_fields:
        if body.get(name) is not None and not isinstance(body[name], str):
            raise ValueError(f"give JSON field {name} as text in json_texts")
    body.update(json_texts or {})
    body.update(data)
    record["data"] = body
    buf = io.BytesIO()
    buf.write(MAGIC)
    buf.write(schema.fingerprint)
    schemaless_writer(buf, schema.parsed, record)
    return buf.getvalue()


def _eid() -> str:
    return str(uuid.uuid4())


def _session(run_id: str, sessions: bool) -> str | None:
    """Each run its own session when the corpus is for the sessions service (else none)."""
    return f"s-{run_id}" if sessions else None


def _opened(run_id: str, tenant: str, sessions: bool = False) -> Poison:
    f = form(
        "run.accepted",
        run_id=run_id,
        sequence=1,
        tenant=tenant,
        data={"goalRef": "goal://poison", "policyVersion": "p-1"},
        eventId=_eid(),
        sessionId=_session(run_id, sessions),
    )
    return Poison(
        f"open {run_id}",
        run_id.encode(),
        encode(f),
        f["eventId"],
        tenant,
        run_id,
        1,
        frozenset({PROCESSED}),
        must_process=True,
    )


def _response(
    name: str,
    run_id: str,
    tenant: str,
    sequence: int,
    *,
    message: str | None = None,
    raw_text: str | None = None,
    allowed: Iterable[str] = (PROCESSED,),
    sessions: bool = False,
) -> Poison:
    eid = _eid()
    f = form(
        "MODEL_RESPONSE",
        run_id=run_id,
        sequence=sequence,
        tenant=tenant,
        data={"message": message, "raw": None},
        eventId=eid,
        sessionId=_session(run_id, sessions),
    )
    value = raw_encode(f, {"raw": raw_text} if raw_text is not None else None)
    return Poison(name, run_id.encode(), value, eid, tenant, run_id, sequence, frozenset(allowed))


def _nested(depth: int) -> str:
    return '{"nested": ' + "[" * depth + "]" * depth + "}"


def corpus(tenant: str = "t1", prefix: str = "poison", sessions: bool = False) -> list[Poison]:
    """The items, each with the run prelude it needs (a run per item); with ``sessions`` each
    run is a session of its own, so that the sessions service takes the items too."""
    rng = random.Random(11)
    items: list[Poison] = []

    def run(tag: str) -> str:
        run_id = f"{prefix}-{tag}-{uuid.uuid4().hex[:6]}"
        items.append(_opened(run_id, tenant, sessions))
        return run_id

    undecodable = frozenset({"undecodable"})
    items.append(
        Poison(
            "random bytes",
            b"random",
            b"\x00" + rng.randbytes(4000),
            None,
            tenant,
            "",
            0,
            undecodable,
        )
    )
    items.append(
        Poison(
            "5 MB compressible garbage",
            b"garbage",
            b"runtrail " * (5 * MB // 9),
            None,
            tenant,
            "",
            0,
            undecodable,
        )
    )
    r = run("5mb")
    items.append(
        _response("a valid 5 MB event", r, tenant, 2, message="x" * (5 * MB), sessions=sessions)
    )
    r = run("u0001")
    items.append(
        _response(
            "a 180 KB response of U+0001 (1.08 MB as JSON)",
            r,
            tenant,
            2,
            raw_text='{"text": "' + "\\u0001" * 180_000 + '"}',
            sessions=sessions,
        )
    )
    r = run("deltas")
    for i in range(3):
        items.append(
            _response(
                f"450 KB delta {i + 1} of 3",
                r,
                tenant,
                2 + i,
                message="d" * 450_000,
                sessions=sessions,
            )
        )
    for depth, allowed in (
        (250, {"too-deep"}),
        (400, {"too-deep"}),
        (5000, {"too-deep", "invalid-payload"}),
    ):
        r = run(f"depth{depth}")
        items.append(
            _response(
                f"JSON nested {depth} deep",
                r,
                tenant,
                2,
                raw_text=_nested(depth),
                allowed=allowed,
                sessions=sessions,
            )
        )
    r = run("inf")
    eid = _eid()
    budget = form(
        "budget.reserved",
        run_id=r,
        sequence=2,
        tenant=tenant,
        data={"budgetId": "b", "amount": 1.0, "unit": "tokens"},
        eventId=eid,
        sessionId=_session(r, sessions),
    )
    items.append(
        Poison(
            "inf in a double",
            r.encode(),
            raw_encode(budget, amount=float("inf")),
            eid,
            tenant,
            r,
            2,
            frozenset({"non-finite"}),
        )
    )
    r = run("1e999")
    items.append(
        _response(
            "1e999 in JSON text",
            r,
            tenant,
            2,
            raw_text='{"value": 1e999}',
            allowed={"non-finite", "invalid-payload"},
            sessions=sessions,
        )
    )
    return items


def canary(i: int, tenant: str = "t1", prefix: str = "canary", sessions: bool = False) -> Poison:
    item = _opened(f"{prefix}-{i}-{uuid.uuid4().hex[:6]}", tenant, sessions)
    return Poison(
        f"canary {i}",
        item.key,
        item.value,
        item.event_id,
        tenant,
        item.run_id,
        1,
        item.allowed,
        True,
    )


def corpus_records(tenant: str = "t1", sessions: bool = False) -> list[Poison]:
    """The corpus with a canary after every item."""
    out: list[Poison] = []
    for i, item in enumerate(corpus(tenant, sessions=sessions)):
        out.append(item)
        if not item.must_process:
            out.append(canary(i, tenant, sessions=sessions))
    return out


def big_topic_config(max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> dict[str, str]:
    """Topic config that takes a legal event of ``max_event_bytes`` (as ``topics ensure`` does)."""
    return {"max.message.bytes": str(max_message_bytes(max_event_bytes))}


def produce_records(bootstrap: str, topic: str, records: Sequence[Poison]) -> list[int]:
    """Produce in order (one partition expected); returns each record's offset."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.max.bytes": max_message_bytes(DEFAULT_MAX_EVENT_BYTES),
            "linger.ms": 5,
        }
    )
    offsets: dict[int, int] = {}

    def delivered(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            assert err is None, f"record {records[i].name} not delivered: {err}"
            offsets[i] = msg.offset()

        return cb

    for i, record in enumerate(records):
        producer.produce(
            topic, value=record.value, key=record.key, partition=0, on_delivery=delivered(i)
        )
        producer.poll(0)
    assert producer.flush(120) == 0
    return [offsets[i] for i in range(len(records))]


def dead_letters_by_offset(messages: Iterable[Any], service: str | None = None) -> dict[int, str]:
    """Source offset -> reason of the dead letters consumed from a DLQ (of one service)."""
    out: dict[int, str] = {}
    for msg in messages:
        headers = dict(msg.headers() or [])
        if service is not None and headers.get("rt.error.service") != service.encode():
            continue
        out[int(headers["rt.source.offset"])] = headers["rt.error.reason"].decode()
    return out


def outcome_failures(
    records: Sequence[Poison],
    offsets: Sequence[int],
    processed: set[int],
    dead: Mapping[int, str],
    extra_reasons: Iterable[str] = (),
) -> list[str]:
    """Why the outcomes differ from what the corpus allows (empty when all is well).

    ``extra_reasons`` are a service's own dead-letter reasons it may give a valid item (the
    projector's ``missing-events``, say)."""
    extra = set(extra_reasons)
    failures = []
    for record, offset in zip(records, offsets, strict=True):
        if offset in processed:
            got = PROCESSED
        elif offset in dead:
            got = dead[offset]
        else:
            failures.append(f"{record.name} (offset {offset}): neither processed nor dead-lettered")
            continue
        allowed = record.allowed | (extra if not record.must_process else set())
        if got not in allowed:
            failures.append(f"{record.name} (offset {offset}): {got}, allowed {sorted(allowed)}")
    return failures
