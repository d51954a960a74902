"""Cost of decoding events without a broker: Avro + upcast + validation, and validation alone.

    python -m bench.codec [--events 20000]

Prints µs/event (best of 7 rounds) over the realistic stream of :mod:`bench.workload`, for
``EventCodec.decode`` (what every consumer pays per message) and for ``validate_json_form``
(the pydantic-core pass into the concrete Event class). Compare two revisions on the same
machine by running both, interleaved, a few times: the machine is usually shared.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench.workload import workload
from runtrail.events import EventCodec, validate_json_form


def best_us(work: Callable[[], object], count: int, rounds: int = 7) -> float:
    """Best wall time of ``rounds`` runs of ``work``, per event, in µs."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20_000)
    args = parser.parse_args()
    codec = EventCodec()
    values = [codec.encode_json_form(form) for form in workload(args.events)]
    forms = [codec.decode_written(value) for value in values]

    def decode() -> None:
        for value in values:
            codec.decode(value)

    def validate() -> None:
        for form in forms:
            validate_json_form(form)

    print(f"decode   (Avro, upcast, validate): {best_us(decode, len(values)):6.2f} µs/event")
    print(f"validate (pydantic-core only):     {best_us(validate, len(forms)):6.2f} µs/event")


if __name__ == "__main__":
    main()
