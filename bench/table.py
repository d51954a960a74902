"""The comparison table of issue 15: events/s, share of the raw consume rate, ratio to a peer.

Printed as Markdown and written with the figures as JSON under bench/results/.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.harness import RESULTS


@dataclass
class Row:
    name: str
    per_second: float
    peer: str | None = None
    peer_per_second: float | None = None


def render(rows: list[Row], raw: float) -> str:
    lines = [
        "| contender | events/s | vs raw consume | vs peer |",
        "|---|---|---|---|",
    ]
    for r in rows:
        share = f"{100 * r.per_second / raw:.1f} %" if raw else ""
        peer = ""
        if r.peer and r.peer_per_second:
            peer = f"{r.per_second / r.peer_per_second:.2f}x {r.peer}"
        lines.append(f"| {r.name} | {r.per_second:,.0f} | {share} | {peer} |")
    return "\n".join(lines)


def write_table(rows: list[Row], raw: float, extra: dict[str, Any]) -> None:
    table = render(rows, raw)
    print("\n" + table)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (RESULTS / f"compare-{stamp}.md").write_text(table + "\n")
    payload = {
        "rows": [
            {
                **asdict(r),
                "vs_raw": r.per_second / raw if raw else None,
                "vs_peer": r.per_second / r.peer_per_second if r.peer_per_second else None,
            }
            for r in rows
        ],
        "raw_per_second": raw,
        **extra,
    }
    out = RESULTS / f"compare-{stamp}.json"
    out.write_text(json.dumps(payload, indent=2))
    print(f"\nresults written to {out} (and .md)")
