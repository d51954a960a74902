"""``runtrail replay projection``: rebuild the run projection from the topic into a fresh store.

Reads the whole events topic (all partitions, up to the high watermarks when it starts) with no
consumer-group commits, builds the projection in a new store, prints progress on stderr while
it runs and a summary at the end; ``--compare-with LIVE`` then prints every run whose rebuilt
projection differs from the live one and exits 1 if any does (the shadow rebuild of seed 002).
The same command is ``runtrail projection replay``.

``replay`` is a command group shared with other modules (``runtrail replay node`` lives in
``capture_cmd``): :func:`replay_group` finds the group whoever created it, or creates it, so
the modules may register in any order.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from runtrail.instants import utc_epoch_ms
from runtrail.persistence.urls import redact_url
from runtrail.whole_numbers import whole_number
from runtrail_tools.cli.common import (
    add_common_flags,
    positive_int,
    replay_group,
    settings_from_args,
)
from runtrail_tools.cli.store_open import missing_store

if TYPE_CHECKING:
    from runtrail_services.projector.rebuild import Comparison
    from runtrail_services.projector.replay_fold import Progress, ReplaySummary

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2
#: Ctrl-C (128 + SIGINT), as ``runtrail`` exits on it elsewhere.
EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> None:
    add_replay_parser(replay_group(subparsers), "projection")


def add_replay_parser(subparsers: Any, name: str) -> argparse.ArgumentParser:
    """Add the rebuild command as ``name`` under ``subparsers`` (used for both spellings)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="rebuild the run projection from the topic into a fresh store",
        description="Rebuild the run projection by replaying the events topic into a new store "
        "(no consumer-group commits; nothing is re-executed). Exits 1 when --compare-with "
        "finds a run that differs.",
    )
    parser.add_argument("--into", required=True, metavar="URL", help="the new store")
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning", action="store_true", help="read every partition from its start"
    )
    start.add_argument(
        "--from-timestamp",
        metavar="T",
        type=parse_timestamp,
        help="start at the first event recorded at or after T (ISO-8601, or epoch ms); runs "
        "that began before T start from --snapshots, or halt",
    )
    parser.add_argument(
        "--snapshots",
        metavar="URL",
        help="start each run from its latest trusted snapshot in this store (untrusted "
        "snapshots are refused and their runs rebuilt from events)",
    )
    parser.add_argument(
        "--compare-with",
        metavar="URL",
        help="the live store: print every run whose rebuilt projection differs",
    )
    parser.add_argument(
        "--snapshot-every",
        type=int,
        metavar="N",
        help="snapshots written into the new store (default RUNTRAIL_PROJECTOR_SNAPSHOT_EVERY)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="processes folding disjoint partitions in parallel (default: one per CPU, at most "
        "one per partition holding events; 1: fold in this process)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_common_flags(parser)
    parser.set_defaults(func=run_replay)
    return parser


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from ``1764410400000`` or ``2026-11-29T10:00:00Z`` (naive = UTC)."""
    given = text.strip()
    moment = whole_number(given) if given.isdigit() else utc_epoch_ms(given)
    if moment is None:
        raise argparse.ArgumentTypeError(f"not a timestamp: {text!r}")
    return moment


def run_replay(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from runtrail.persistence.kinds import PROJECTIONS
    from runtrail.persistence.registry import open_store
    from runtrail.projection import ProjectionStore
    from runtrail_services.projector.partitioned_fold import RunInTwoPartitions
    from runtrail_services.projector.rebuild import (
        StoreNotEmpty,
        compare_with_live,
        rebuild_projection,
    )
    from runtrail_services.projector.rebuild_workers import ReplayWorkerFailed
    from runtrail_services.projector.settings import ProjectorSettings
    from runtrail_services.projector.topic_reader import TopicReadError

    settings = settings_from_args(args)
    projector = ProjectorSettings.load()
    every = projector.snapshot_every if args.snapshot_every is None else args.snapshot_every
    stores: list[ProjectionStore] = []
    # stores this command only reads must exist: opening a SQLite URL would create an empty
    # one, and compare every run as "only in the rebuild" (checked before any store is opened,
    # so a refusal creates nothing, not even --into)
    for flag, url in (("--compare-with", args.compare_with), ("--snapshots", args.snapshots)):
        missing = None if url is None else missing_store(url, three_slashes="relative")
        if missing is not None:
            return _fail(EXIT_USAGE, f"the {flag} store {redact_url(url)} {missing}")
    try:
        into = open_store(PROJECTIONS, args.into)
        stores.append(into)
        snapshots = open_store(PROJECTIONS, args.snapshots) if args.snapshots else None
        if snapshots is not None:
            stores.append(snapshots)
        live = open_store(PROJECTIONS, args.compare_with) if args.compare_with else None
        if live is not None:
            stores.append(live)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        start = "the beginning"
        if args.from_timestamp is not None:
            start = datetime.fromtimestamp(args.from_timestamp / 1000, UTC).isoformat()
        _err(f"replaying {settings.events_topic} from {start} into {args.into}")
        try:
            summary = rebuild_projection(
                settings,
                into,
                from_timestamp_ms=args.from_timestamp,
                snapshots=snapshots,
                snapshot_every=every,
                cached_runs=projector.cached_runs,
                halt_on_gap=projector.halt_on_gap,
                on_progress=None if args.quiet else _print_progress,
                workers=args.workers,
            )
        except StoreNotEmpty as exc:
            return _fail(EXIT_USAGE, f"--into {redact_url(args.into)}: {exc}")
        except (TopicReadError, KafkaException, RunInTwoPartitions, ReplayWorkerFailed) as exc:
            return _fail(EXIT_USAGE, str(exc))
        except KeyboardInterrupt:
            # what was written stays (each batch is one transaction), and the store is marked
            # unfinished: a re-run into it is refused, saying so
            return _fail(
                EXIT_INTERRUPTED,
                f"interrupted: the --into store {redact_url(args.into)} is incomplete (some "
                "runs, and the offsets of some partitions only): delete it and run the replay "
                "again",
            )
        _print_summary(summary)
        if live is None:
            return EXIT_OK
        comparison = compare_with_live(
            live, into, settings.events_topic, [r.partition for r in summary.ranges]
        )
        return _print_comparison(args.compare_with, comparison)
    finally:
        for store in stores:
            store.close()


def _print_progress(p: Progress) -> None:
    share = f" ({p.events / p.total:.0%})" if p.total else ""
    _err(
        f"  {p.events:,}/{p.total:,} events{share}  {p.runs:,} runs  "
        f"{p.rate:,.0f} events/s  {p.halted} halted"
    )


def _print_summary(s: ReplaySummary) -> None:
    out = sys.stdout
    print(
        f"replayed {s.events:,} events of {s.topic} ({len(s.ranges)} partitions, "
        f"{s.workers} worker{'s' if s.workers > 1 else ''}) in "
        f"{s.seconds:.2f}s: {s.rate:,.0f} events/s",
        file=out,
    )
    print(
        f"  runs: {s.runs:,}  applied: {s.applied:,}  duplicates: {s.duplicates:,}  "
        f"skipped (halted runs): {s.skipped:,}  unreadable: {len(s.unreadable):,}",
        file=out,
    )
    if s.untrusted_snapshots:
        print(
            f"  snapshots not trusted (runs rebuilt from events): {s.untrusted_snapshots:,}",
            file=out,
        )
    for tenant, run, reason in s.refused_snapshots:
        # a store keeps one snapshot per run: with it refused, the run starts from zero
        print(
            f"    {tenant}/{run}: snapshot refused ({reason}); replayed from zero instead "
            "(a store keeps no earlier snapshot)",
            file=out,
        )
    print(f"  halted runs: {len(s.halted):,}", file=out)
    for halt in s.halted:
        c = halt.coordinates
        print(
            f"    {halt.tenant_id}/{halt.run_id} at {c.topic}[{c.partition}]@{c.offset} "
            f"(sequence {c.sequence}): {halt.reason}",
            file=out,
        )
    for bad in s.unreadable[:20]:
        print(f"  unreadable {s.topic}[{bad.partition}]@{bad.offset}: {bad.reason}", file=out)
    offsets = ", ".join(f"{p}:{o}" for p, o in sorted(s.offsets.items()))
    print(f"  the new store continues at offsets {offsets}", file=out)


def _print_comparison(live_url: str, c: Comparison) -> int:
    if not c.same_position:
        _err(
            f"note: the live store is at offsets {c.live_offsets}, the rebuild at "
            f"{c.rebuilt_offsets}: differences may be lag, not logic"
        )
    if not c.differences:
        print(f"no difference with {live_url}")
        return EXIT_OK
    print(f"{len(c.differences)} run(s) differ from {live_url}:")
    for d in c.differences:
        run = f"{d.tenant_id}/{d.run_id}"
        if d.kind == "only_in_a":
            print(f"  {run}: only in the live store (version {d.a_version})")
        elif d.kind == "only_in_b":
            print(f"  {run}: only in the rebuild (version {d.b_version})")
        else:
            print(
                f"  {run}: differs in {', '.join(d.fields)} "
                f"(live version {d.a_version}, rebuilt {d.b_version})"
            )
    return EXIT_DIFFERENT


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _fail(status: int, message: str) -> int:
    print(f"runtrail: {message}", file=sys.stderr)
    return status
