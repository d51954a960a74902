"""``runtrail otlp``: what the OTLP ingest did not record.

* ``otlp drops [--tenant T] [--run R | --no-run] [--since WHEN] [--limit N] [--json]`` — the
  spans and log records ingest did not record, or recorded incomplete (a model span without
  content), per tenant, run and reason: how many, first and last seen, one span name. Read
  from the drops store every receiver and mapper writes (``RUNTRAIL_OTLP_DROPS_STORE_URL``,
  else ``sqlite:///<state dir>/otlp-drops.db``); ``--no-run`` lists what belonged to no run
  (a log record without a span context). ``--since`` takes a timestamp
  (``2026-12-01T09:30:00Z``, epoch ms) or an age (``90s``, ``15m``, ``2h``, ``7d``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from runtrail_tools.cli.common import add_common_flags, positive_int, settings_from_args
from runtrail_tools.cli.replay_projection_cmd import parse_timestamp
from runtrail_tools.cli.store_open import open_store_or_explain

_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def register(subparsers: Any) -> None:
    otlp = subparsers.add_parser(
        "otlp",
        help="what the OTLP ingest did not record",
        description="What the OTLP ingest (otlp-ingest, otlp-mapper) did not record.",
    )
    sub = otlp.add_subparsers(dest="otlp_command", metavar="COMMAND", required=True)
    drops = sub.add_parser(
        "drops",
        help="spans and log records not recorded, per run and reason",
        description="Spans and log records not recorded (or recorded incomplete), per tenant, "
        "run and reason, the last seen first.",
    )
    drops.add_argument("--tenant", help="only this tenant's (default: every tenant's)")
    which = drops.add_mutually_exclusive_group()
    which.add_argument("--run", help="only this run's (its OTel trace ID)")
    which.add_argument(
        "--no-run", action="store_true", help="only what belonged to no run (no span context)"
    )
    drops.add_argument(
        "--since", type=since_ms, metavar="WHEN", help="last seen at or after WHEN (time or age)"
    )
    drops.add_argument(
        "--limit", type=positive_int, default=1000, help="at most N rows (default 1000)"
    )
    drops.add_argument("--json", action="store_true", help="JSON rows instead of a table")
    drops.add_argument(
        "--store-url", help="sqlite:///path.db or postgresql://… (default: the ingest's)"
    )
    add_common_flags(drops, tenant=False)
    drops.set_defaults(func=run_drops)


def since_ms(text: str, *, now_ms: int | None = None) -> int:
    """Epoch milliseconds of ``text``: a timestamp, or an age before now (``15m``)."""
    value = text.strip()
    if len(value) > 1 and value[-1] in _UNITS_MS and value[:-1].isdigit():
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return now - int(value[:-1]) * _UNITS_MS[value[-1]]
    return parse_timestamp(value)


def run_drops(args: argparse.Namespace) -> int:
    from runtrail.drops.store import rows_json
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import OTLP_DROPS

    settings = settings_from_args(args)
    url = args.store_url or settings.resolved_otlp_drops_url()
    store = open_store_or_explain(
        "OTLP drops", url, lambda: open_store(OTLP_DROPS, url), mode="read"
    )
    try:
        rows = store.rows(
            tenant=args.tenant,
            run_id="" if args.no_run else args.run,
            since_ms=args.since,
            limit=args.limit,
        )
    finally:
        store.close()
    if args.json:
        sys.stdout.write(json.dumps(rows_json(rows), indent=2) + "\n")
        return 0
    if not rows:
        sys.stdout.write("nothing dropped\n")
        return 0
    header = ("TENANT", "RUN", "REASON", "COUNT", "SAMPLE", "FIRST SEEN", "LAST SEEN")
    table = [header] + [
        (
            r.tenant_id,
            r.run_id or "(no run)",
            r.reason,
            str(r.count),
            r.sample,
            _iso(r.first_seen_ms),
            _iso(r.last_seen_ms),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        sys.stdout.write(line.rstrip() + "\n")
    return 0


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
