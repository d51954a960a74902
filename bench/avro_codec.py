"""µs per event of the generated Avro codec (:mod:`runtrail.events.avro_fast`) against fastavro.

    python -m bench.avro_codec --events 20000

Encodes the realistic workload's events with fastavro, then times, event for event on the
same bodies: fastavro's ``schemaless_reader`` (through a BytesIO, as the codec used it)
against the generated decoder, and ``schemaless_writer(strict=True)`` against the generated
encoder; checks on the way that both give the same records and bytes. Interleaved rounds,
best of each (the least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from bench.harness import RESULTS
from bench.workload import workload
from runtrail.events import EventCodec
from runtrail.events.avro_fast import FastCodec, compile_schema
from runtrail.events.codec import HEADER_LEN, _dump_json_fields


def bodies(count: int) -> list[tuple[Any, FastCodec, dict[str, Any], bytes]]:
    """(parsed schema, generated codec, Avro record, body) of ``count`` workload events."""
    codec = EventCodec()
    fast: dict[bytes, FastCodec] = {}
    out = []
    for form in workload(count):
        value = codec.encode_json_form(form)
        schema = codec._by_fp[value[2:HEADER_LEN]]
        if schema.fingerprint not in fast:
            fast[schema.fingerprint] = compile_schema(schema.parsed)
        record = dict(form)
        record["sequence"] = int(record["sequence"])
        record["data"] = _dump_json_fields(record["data"], schema.json_fields)
        out.append((schema.parsed, fast[schema.fingerprint], record, value[HEADER_LEN:]))
    return out


def timed(items: list[Any], step: Any) -> float:
    started = time.perf_counter()
    for item in items:
        step(item)
    return (time.perf_counter() - started) / len(items) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    items = bodies(args.events)
    for parsed, fast, record, body in items:  # exact on every event measured
        assert fast.decode_fast(body, 0) == (schemaless_reader(io.BytesIO(body), parsed), len(body))
        out = bytearray()
        fast.encode_fast(out, record)
        assert bytes(out) == body

    def fa_decode(item: Any) -> None:
        schemaless_reader(io.BytesIO(item[3]), item[0], None)

    def gen_decode(item: Any) -> None:
        item[1].decode_fast(item[3], 0)

    def fa_encode(item: Any) -> None:
        schemaless_writer(io.BytesIO(), item[0], item[2], strict=True)

    def gen_encode(item: Any) -> None:
        item[1].encode_fast(bytearray(), item[2])

    steps = {
        "fastavro decode": fa_decode,
        "generated decode": gen_decode,
        "fastavro encode": fa_encode,
        "generated encode": gen_encode,
    }
    best = {name: float("inf") for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            best[name] = min(best[name], timed(items, step))
    for name, us in best.items():
        print(f"{name:<18} {us:6.2f} µs/event")
    speedup = {
        "decode": best["fastavro decode"] / best["generated decode"],
        "encode": best["fastavro encode"] / best["generated encode"],
    }
    print(f"speed-up: decode {speedup['decode']:.2f}x, encode {speedup['encode']:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"avro_codec-{time.strftime('%Y%m%dT%H%M%S')}.json"
    payload = {"events": args.events, "us_per_event": best, "speedup": speedup}
    out.write_text(json.dumps(payload, indent=2))
    print(f"results written to {out}")


if __name__ == "__main__":
    main()
