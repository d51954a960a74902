"""``runtrail kafka up|down|status|fetch`` and ``runtrail topics ensure``.

The local broker lives in ``<state dir>/kafka`` so that every command, from any process,
finds the same broker through its pid and state files.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtrail.config import Settings
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.cluster import LocalCluster, LocalKafka, local_kafka

#: Exit status of ``runtrail kafka status`` when no broker runs.
NOT_RUNNING = 3


def broker_for(settings: Settings, args: argparse.Namespace | None = None) -> LocalKafka:
    """The local broker or cluster of ``settings.state_dir``, on the ports of the flags or
    settings, of ``--brokers`` nodes (else whatever the folder holds)."""
    return local_kafka(
        settings,
        getattr(args, "brokers", None),
        port=getattr(args, "port", None),
        controller_port=getattr(args, "controller_port", None),
    )


def _pids(broker: LocalKafka) -> str:
    if isinstance(broker, LocalCluster):
        return "pids " + ", ".join(str(pid) if pid else "-" for pid in broker.pids())
    return f"pid {broker.pid}"


def _up(args: argparse.Namespace) -> int:
    try:
        broker = broker_for(settings_from_args(args), args)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    if isinstance(broker, LocalBroker) and broker.is_running():
        state = broker.read_state()
        address = state.bootstrap_servers if state else broker.bootstrap_servers
        print(f"kafka already running at {address} (pid {broker.pid})")
        return 0
    try:
        broker.start(timeout=args.timeout)
    except BrokerError as exc:
        print(f"runtrail: kafka did not start: {exc}", file=sys.stderr)
        return 1
    print(f"kafka running at {broker.bootstrap_servers} ({_pids(broker)})")
    print(f"  logs: {broker.server_log}")
    print(f"  export RUNTRAIL_BOOTSTRAP_SERVERS={broker.bootstrap_servers}")
    return 0


def _down(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        broker = broker_for(settings)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    if broker.pid is None:
        broker.stop()  # clears stale pid/state files
        print("kafka not running")
        return 0
    pids = _pids(broker)
    try:
        broker.stop(timeout=args.timeout)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    print(f"kafka stopped ({pids})")
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        broker = broker_for(settings_from_args(args))
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    if broker.pid is None:
        print(f"kafka not running (home {broker.home})")
        return NOT_RUNNING
    state = broker.read_state()
    address = state.bootstrap_servers if state else broker.bootstrap_servers
    print(f"kafka running at {address} ({_pids(broker)}, home {broker.home})")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    broker = broker_for(settings_from_args(args))
    try:
        libs = broker.ensure_jars()
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    print(f"kafka broker jars in {libs}")
    return 0


def _topics_ensure(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from runtrail.kafka.client_log import quiet_unless_verbose
    from runtrail.kafka.topics import TopicsError, ensure_design_topics

    extra: dict[str, Any] = {
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
    }
    settings = settings_from_args(args, **extra)
    admin = AdminClient(settings.kafka_config(logger=quiet_unless_verbose(args.verbose)))
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
    """Add the ``kafka`` and ``topics`` command groups."""
    kafka = subparsers.add_parser(
        "kafka", help="run a local Kafka broker, or a cluster of several (KRaft)"
    )
    kafka_sub = kafka.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    up = kafka_sub.add_parser("up", help="start the local broker (fetching its jars once)")
    add_common_flags(up)
    # --kafka-port is the one name (dev up and demo take it too); --port stays a hidden alias
    up.add_argument(
        "--kafka-port",
        dest="port",
        type=int,
        metavar="N",
        help="broker port (RUNTRAIL_KAFKA_PORT, default 9092)",
    )
    up.add_argument("--port", dest="port", type=int, help=argparse.SUPPRESS)
    up.add_argument(
        "--kafka-controller-port",
        dest="controller_port",
        type=int,
        metavar="N",
        help="controller port (RUNTRAIL_KAFKA_CONTROLLER_PORT, default 9093)",
    )
    up.add_argument("--controller-port", dest="controller_port", type=int, help=argparse.SUPPRESS)
    up.add_argument(
        "--brokers",
        type=int,
        metavar="N",
        help="nodes of a local cluster (default 1; each next node two ports higher)",
    )
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the broker")
    up.set_defaults(func=_up)

    down = kafka_sub.add_parser("down", help="stop the local broker")
    add_common_flags(down)
    down.add_argument("--timeout", type=float, default=20.0, help="seconds before SIGKILL")
    down.set_defaults(func=_down)

    status = kafka_sub.add_parser(
        "status", help=f"is the local broker running? (exit 0 if so, {NOT_RUNNING} if not)"
    )
    add_common_flags(status)
    status.set_defaults(func=_status)

    fetch = kafka_sub.add_parser(
        "fetch", help="fetch the broker jars with Maven into the cache (or check KAFKA_HOME)"
    )
    add_common_flags(fetch)
    fetch.set_defaults(func=_fetch)

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
