"""``runtrail topics ensure``: the design's topics on any cluster (it needs no local broker, so
it imports none of the broker manager)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtrail_tools.cli.common import add_common_flags, settings_from_args


def _topics_ensure(args: argparse.Namespace) -> int:
    from runtrail.kafka.admin import admin_client
    from runtrail.kafka.auth import AuthWatch, wait_connected
    from runtrail.kafka.client_log import quiet_unless_verbose
    from runtrail.kafka.topics import TopicsError, ensure_design_topics

    extra: dict[str, Any] = {
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
    }
    settings = settings_from_args(args, **extra)
    config = settings.kafka_config(logger=quiet_unless_verbose(args.verbose))
    config["error_cb"] = watch = AuthWatch(config)
    admin = admin_client(config)
    wait_connected(admin, watch, timeout=args.timeout)  # a refused login fails here, at once
    try:
        report = ensure_design_topics(admin, settings, timeout=args.timeout)
    except TopicsError as exc:
        print(f"runtrail: on {settings.bootstrap_servers}: {exc}", file=sys.stderr)
        return 2
    print(report.format_table())
    if report.has_differences:
        print(
            "runtrail: some topics differ from the design; they were left as they are",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add the ``topics`` command group."""
    topics = subparsers.add_parser("topics", help="the design's Kafka topics")
    topics_sub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    ensure = topics_sub.add_parser(
        "ensure",
        help="create missing topics, report existing ones that differ (exit 1 if any)",
    )
    add_common_flags(ensure)
    ensure.add_argument("--partitions", type=int, help="partitions (RUNTRAIL_PARTITIONS)")
    ensure.add_argument(
        "--replication-factor",
        type=int,
        help="replication factor (RUNTRAIL_REPLICATION_FACTOR; default: the cluster's)",
    )
    ensure.add_argument("--timeout", type=float, default=30.0, help="seconds per admin call")
    ensure.set_defaults(func=_topics_ensure)
