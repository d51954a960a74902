"""``runtrail offsets show|set SERVICE``: where a service reads, and moving it (skip, rewind).

A service's position is in up to two places: its consumer group's committed offsets (every
service) and, for audit, projector and resume-cache, the positions its own store keeps with its
output — those win on assignment, so Kafka's own offset tools cannot move them. ``set`` moves
both, per partition, to an offset, a time, the log's start or end, or by a shift; it refuses
while the group has live members (one would overwrite it). ``--dry-run`` prints the plan only.
The store and options are the service's: the same ``-o KEY=VALUE`` as ``runtrail run``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from runtrail.runtime.registry import SERVICES
from runtrail_tools.cli.common import add_common_flags, settings_from_args

if TYPE_CHECKING:
    from runtrail.config import Settings
    from runtrail_tools.offsets.plan import Target
    from runtrail_tools.offsets.stores import StorePositions

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    offsets = subparsers.add_parser(
        "offsets",
        help="show or move where a service reads (its group and its store)",
        description="Show or move a service's positions: its consumer group's committed "
        "offsets and the positions its own store keeps (audit, projector, resume-cache).",
    )
    sub = offsets.add_subparsers(dest="offsets_command", metavar="ACTION", required=True)

    show = sub.add_parser(
        "show", help="per partition: group offset, store position, log start/end, lag"
    )
    _service_flags(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show.set_defaults(func=run_show)

    move = sub.add_parser(
        "set",
        help="move the group's and the store's positions (service stopped)",
        description="Move SERVICE's positions, per partition. Offsets are next offsets: to "
        "skip the event at offset k, --to-offset k+1. Refused while the group has members.",
    )
    _service_flags(move)
    where = move.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-offset", type=int, metavar="N", help="this next offset")
    where.add_argument(
        "--to-time", metavar="ISO8601", help="the first event at or after this time (UTC if naive)"
    )
    where.add_argument("--to-earliest", action="store_true", help="the log's first offset")
    where.add_argument("--to-latest", action="store_true", help="the log end (skip everything)")
    where.add_argument(
        "--shift", type=int, metavar="±N", help="from the current position, N forward or back"
    )
    move.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    move.add_argument(
        "--new-group",
        action="store_true",
        help="move although the group never committed on the topic while the store holds "
        "positions (a group new to this store, or whose offsets expired); without it that "
        "is refused as the wrong --group",
    )
    move.set_defaults(func=run_set)


def _service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("service", help=f"service name: {', '.join(sorted(SERVICES))}")
    parser.add_argument("--group", help="consumer group (default runtrail.SERVICE)")
    parser.add_argument(
        "--partition",
        type=int,
        action="append",
        metavar="P",
        help="only this partition (repeat; default: all)",
    )
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the service's option, as given to `runtrail run` (e.g. -o store_url=…)",
    )
    add_common_flags(parser)


class _Context:
    """What both actions read: broker, group, partitions, positions."""

    def __init__(self, args: argparse.Namespace) -> None:
        from runtrail_tools.offsets.group import Broker, OffsetsError

        if args.service not in SERVICES:
            raise OffsetsError(
                f"unknown service {args.service!r} (known: {', '.join(sorted(SERVICES))})"
            )
        settings = settings_from_args(args, group=args.group)
        self.service = args.service
        self.group = settings.group or f"runtrail.{args.service}"
        self.topic = settings.events_topic
        self.broker = Broker(settings)
        self.all_partitions = existing = self.broker.partitions(self.topic)
        wanted = args.partition or existing
        unknown = sorted(set(wanted) - set(existing))
        if unknown:
            raise OffsetsError(f"topic {self.topic!r} has partitions {existing}, not {unknown}")
        self.partitions = sorted(set(wanted))
        malformed = [o for o in args.option if "=" not in o]
        if malformed:
            raise OffsetsError(f"-o expects KEY=VALUE, got {', '.join(malformed)}")
        options = dict(o.split("=", 1) for o in args.option)
        self.store = _open_store(args.service, settings, options)
        try:
            self.marks = self.broker.watermarks(self.topic, self.partitions)
            self.committed = self.broker.committed(self.group, self.topic, self.partitions)
            self.stored = self.read_store(self.partitions) if self.store else None
        except BaseException:
            self.close()
            raise
        self.falls_back = self.store.falls_back_to_group if self.store else True

    def read_store(self, partitions: list[int]) -> dict[int, int]:
        """The store's positions for ``partitions``; a store that cannot be read (locked, gone,
        unreachable) is a :class:`StoreUnreachable` naming it, not a traceback."""
        from runtrail_tools.cli.store_open import open_store_or_explain

        store = self.store
        assert store is not None
        return open_store_or_explain(
            self.service, store.where, lambda: store.read(self.topic, partitions)
        )

    def foreign_store(self) -> str | None:
        """Why this store is almost surely not the named group's, or None.

        Every service commits its group's offsets as it goes, also those that keep their own
        positions (audit, projector, resume-cache). A store that holds positions on the topic
        while the named group never committed an offset on any of its partitions was written
        by a service reading as another group: a mistyped or forgotten ``--group``. Moving it
        would move a store a live service (not a member of this group) keeps in memory and
        writes back over the move."""
        if self.store is None:
            return None
        held = sorted(self.read_store(self.all_partitions))
        if not held or self.broker.committed(self.group, self.topic, self.all_partitions):
            return None
        return (
            f"group {self.group!r} has no committed offset on topic {self.topic!r}, but "
            f"the store {self.store.where} holds positions for partition(s) "
            f"{', '.join(map(str, held))}: the {self.service} that wrote them reads as another "
            f"group (every service commits its group's offsets; runtrail.{self.service} unless "
            "it was started with --group). Give that group with --group; `runtrail offsets "
            f"show {self.service} --group G` shows a group's offsets and members"
        )

    def header(self) -> str:
        store = self.store.where if self.store else "none (the group's offsets are its positions)"
        return f"service {self.service}, group {self.group}, topic {self.topic}, store {store}"

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _open_store(service: str, settings: Settings, options: dict[str, str]) -> StorePositions | None:
    """The service's store, as ``runtrail run`` opens it; a store that cannot be opened is a
    :class:`StoreUnreachable` naming it (one line, exit 2, from ``cli.main``)."""
    from runtrail_tools.cli.store_open import open_store_or_explain
    from runtrail_tools.offsets.stores import open_store_positions, store_url

    url = store_url(service, settings, options)
    if url is None:
        return None
    return open_store_or_explain(
        service, url, lambda: open_store_positions(service, settings, options)
    )


def _open(args: argparse.Namespace) -> _Context | None:
    from runtrail_tools.offsets.group import OffsetsError

    try:
        return _Context(args)
    except (OffsetsError, ValueError) as exc:
        sys.stderr.write(f"offsets {args.offsets_command}: {exc}\n")
        return None


def _cell(value: int | None) -> str:
    from runtrail_tools.offsets.stores import BEGINNING

    if value is None:
        return "-"
    return "beginning" if value == BEGINNING else str(value)


def run_show(args: argparse.Namespace) -> int:
    from runtrail_tools.offsets.plan import current_position

    ctx = _open(args)
    if ctx is None:
        return EXIT_USAGE
    try:
        rows = []
        for p in ctx.partitions:
            mark = ctx.marks[p]
            group = ctx.committed.get(p)
            store = ctx.stored.get(p) if ctx.stored is not None else None
            position = current_position(p, ctx.committed, ctx.stored, ctx.falls_back)
            start_at = position if position is not None else mark.start
            rows.append(
                {
                    "partition": p,
                    "group": group,
                    "store": store,
                    "logStart": mark.start,
                    "logEnd": mark.end,
                    "lag": max(mark.end - start_at, 0),
                }
            )
        members = ctx.broker.members(ctx.group)
        foreign = ctx.foreign_store()
        if foreign is not None:
            sys.stderr.write(f"offsets show: warning: {foreign}\n")
        if args.json:
            document = {
                "service": ctx.service,
                "group": ctx.group,
                "topic": ctx.topic,
                "store": ctx.store.where if ctx.store else None,
                "activeMembers": members,
                "partitions": rows,
            }
            sys.stdout.write(json.dumps(document, indent=2) + "\n")
            return EXIT_OK
        print(ctx.header())
        print(f"active members: {', '.join(members) if members else 'none'}")
        print(
            f"{'partition':>9} {'group':>10} {'store':>10} {'log-start':>10} {'log-end':>10} {'lag':>8}"
        )
        for row in rows:
            print(
                f"{row['partition']:>9} {_cell(row['group']):>10} {_cell(row['store']):>10} "
                f"{row['logStart']:>10} {row['logEnd']:>10} {row['lag']:>8}"
            )
        return EXIT_OK
    finally:
        ctx.close()


def run_set(args: argparse.Namespace) -> int:
    from runtrail_tools.offsets.group import GroupActive, OffsetsError
    from runtrail_tools.offsets.plan import plan_moves

    ctx = _open(args)
    if ctx is None:
        return EXIT_USAGE
    try:
        try:
            target = _target(args)
            by_time = (
                ctx.broker.offsets_for_time(ctx.topic, ctx.partitions, target.value)
                if target.kind == "time"
                else None
            )
            moves = plan_moves(
                target,
                ctx.partitions,
                ctx.marks,
                ctx.committed,
                ctx.stored,
                by_time,
                falls_back_to_group=ctx.falls_back,
            )
        except OffsetsError as exc:
            sys.stderr.write(f"offsets set: {exc}\n")
            return EXIT_USAGE
        print(ctx.header())
        print(f"move {target.describe()}{' (dry run: nothing written)' if args.dry_run else ''}")
        print(f"{'partition':>9} {'group':>10} {'store':>10} {'->':>4} {'to':>10}  note")
        for m in moves:
            store = _cell(m.store_from) if ctx.store is not None else "n/a"
            print(
                f"{m.partition:>9} {_cell(m.group_from):>10} {store:>10} {'->':>4} {m.to:>10}"
                f"  {m.note}"
            )
        try:
            ctx.broker.require_inactive(ctx.group)
        except GroupActive as exc:
            sys.stderr.write(f"offsets set: refused: {exc}\n")
            return EXIT_REFUSED
        foreign = None if args.new_group else ctx.foreign_store()
        if foreign is not None:
            sys.stderr.write(
                f"offsets set: refused: {foreign}. If {ctx.group!r} is the service's group and "
                "its offsets are gone (a new group for this store, or offsets the broker "
                "expired while the service was stopped), add --new-group\n"
            )
            return EXIT_REFUSED
        if args.dry_run:
            return EXIT_OK
        offsets = {m.partition: m.to for m in moves}
        try:
            ctx.broker.alter(ctx.group, ctx.topic, offsets)
        except OffsetsError as exc:
            sys.stderr.write(f"offsets set: nothing moved: {exc}\n")
            return EXIT_REFUSED
        if ctx.store is not None:
            try:
                ctx.store.write(ctx.topic, offsets)
            except Exception as exc:
                from runtrail.publisher.redaction import redact_text

                sys.stderr.write(
                    f"offsets set: the group's offsets moved but the store's did not "
                    f"({ctx.store.where}: {redact_text(str(exc))}); run the same command again\n"
                )
                return EXIT_REFUSED
        print(
            f"moved {len(offsets)} partition(s) of group {ctx.group}"
            + (f" and store {ctx.store.where}" if ctx.store is not None else "")
        )
        return EXIT_OK
    finally:
        ctx.close()


def _target(args: argparse.Namespace) -> Target:
    from runtrail_tools.offsets.plan import Target, parse_time

    if args.to_offset is not None:
        return Target("offset", args.to_offset)
    if args.to_time is not None:
        return Target("time", parse_time(args.to_time))
    if args.to_earliest:
        return Target("earliest")
    if args.to_latest:
        return Target("latest")
    return Target("shift", args.shift)
