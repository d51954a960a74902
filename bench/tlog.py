"""Benchmark of the transparency log: what it adds to an append, and a big checkpoint.

    python -m bench.tlog [--events 100000] [--batch 500] [--leaves 1000000] [--store URL]

1. **Append rate**, in one run: the realistic workload sealed and appended to a fresh store
   in flush-sized batches, once as the store does it (each link also a leaf of the log) and
   once with the leaf step left out (the store as it was before the log), same events, same
   batches; the ratio is what the log costs the audit service's write path.
2. **TreeHead and tiles for ``--leaves`` leaves**: a log of that many leaves (written
   straight into its table), then one publish from a fresh process state — read every
   entry, build the tree, check and sign the checkpoint, write every tile and entry bundle
   to a folder — timed end to end.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.harness import Rate, report
from bench.workload import workload
from runtrail.audit import store_sql
from runtrail.audit.link import Link, RunHead, genesis_head, seal
from runtrail.audit.note import NoteSigner
from runtrail.audit.tile_store import FileTileStore
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.transparency import LogPublisher


def sealed_batches(events: list[dict[str, Any]], batch: int) -> list[list[Link]]:
    """The events sealed onto their runs' chains, in batches as a flush would write them."""
    heads: dict[tuple[str, str], RunHead] = {}
    out: list[list[Link]] = []
    for start in range(0, len(events), batch):
        links = []
        for event in events[start : start + batch]:
            key = (event["tenantId"], event["runId"])
            head = heads.get(key) or genesis_head(*key)
            link = seal(head.length, head.hash, event)
            heads[key] = RunHead(key[0], key[1], head.length + 1, link.hash)
            links.append(link)
        out.append(links)
    return out


@contextmanager
def without_the_log() -> Iterator[None]:
    original = store_sql.SqlLinkStore._append_leaves
    store_sql.SqlLinkStore._append_leaves = lambda self, cur, rows: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        store_sql.SqlLinkStore._append_leaves = original  # type: ignore[method-assign]


def append_rate(url: str, batches: list[list[Link]], label: str) -> Rate:
    store = open_store(AUDIT_LINKS, url)
    try:
        started = time.perf_counter()
        for links in batches:
            store.append_batch(links, {})
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    return Rate(label, sum(map(len, batches)), elapsed)


def big_checkpoint(work: Path, leaves: int) -> Rate:
    url = sqlite_url(work / "big.db")
    store = open_store(AUDIT_LINKS, url)
    try:
        rows = (
            (i, "t", f"r{i >> 10}", i & 1023, hashlib.sha256(i.to_bytes(8, "big")).hexdigest())
            for i in range(leaves)
        )
        with store._db.transaction() as cur:  # type: ignore[attr-defined]
            cur.executemany("INSERT INTO audit_log VALUES (?, ?, ?, ?, ?)", rows)
        signer = NoteSigner("bench.local/log", Ed25519PrivateKey.generate())
        publisher = LogPublisher(store, signer, "bench.local/log", FileTileStore(work / "tlog"))
        started = time.perf_counter()
        stored = publisher.publish()
        elapsed = time.perf_counter() - started
        assert stored is not None and stored.tree_head.size == leaves
    finally:
        store.close()
    return Rate(
        f"checkpoint + tiles for {leaves:,} leaves (read, tree, sign, write)", leaves, elapsed
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500, help="links per append transaction")
    parser.add_argument("--leaves", type=int, default=1_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tlog-"))
    print(f"sealing {args.events:,} events …", flush=True)
    batches = sealed_batches(list(workload(args.events)), args.batch)
    print("appending without the log, then with it …", flush=True)
    with without_the_log():
        before = append_rate(sqlite_url(work / "before.db"), batches, "append, links only")
    after = append_rate(sqlite_url(work / "after.db"), batches, "append, links + log leaves")
    print(f"checkpoint of {args.leaves:,} leaves …", flush=True)
    big = big_checkpoint(work, args.leaves)
    report("tlog (the transparency log's cost and a big checkpoint)", [before, after, big], before)
    print(f"append with the log: {after.per_second / before.per_second:.0%} of the rate without")
    print(f"checkpoint + tiles, {args.leaves:,} leaves: {big.seconds:.2f} s")


if __name__ == "__main__":
    main()
